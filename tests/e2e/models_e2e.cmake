# Resident models end to end, through libweft and a real weftd cpu:4:
# loading the diffusers-made fixtures, parity of the forward on every mesh
# (tp, ulysses, ring and together; f32 and bf16) with live re-sharding,
# pre-sharded checkpoints, bad checkpoints (e2e_models), and re-sharding
# under load from 4 client threads (e2e_reshard_load).
foreach(t models reshard_load)
  add_executable(test_${t} ${CMAKE_CURRENT_LIST_DIR}/test_${t}.c)
  target_link_libraries(test_${t} PRIVATE weft_fluxio weft_stwriter
    weft_testsupport weft Threads::Threads m)
  add_test(NAME e2e_${t} COMMAND test_${t} $<TARGET_FILE:weftd>
    ${WEFT_TESTS_DIR}/fixtures)
  set_tests_properties(e2e_${t} PROPERTIES TIMEOUT 240)
endforeach()

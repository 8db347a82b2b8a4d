# Context parallelism end to end, through libweft and a real weftd cpu:4:
# the parity grid on every mesh against an fp64 reference (e2e_parity),
# and reconfiguration under load from 4 client threads (e2e_reconfig_load).
foreach(t parity reconfig_load)
  add_executable(test_${t} ${CMAKE_CURRENT_LIST_DIR}/test_${t}.c)
  target_link_libraries(test_${t} PRIVATE weft_testsupport weft Threads::Threads m)
  target_compile_options(test_${t} PRIVATE -O2)
  add_test(NAME e2e_${t} COMMAND test_${t} $<TARGET_FILE:weftd>)
  set_tests_properties(e2e_${t} PROPERTIES TIMEOUT 180)
endforeach()

# A Wan model (tests/fixtures/wan-tiny) in a real weftd cpu:4: loaded
# through libweft, its forward through wf_forward_named on dp, ring,
# ulysses and ring x ulysses meshes against diffusers, tp 2 and a bad
# shape refused.
add_executable(test_wan_e2e ${CMAKE_CURRENT_LIST_DIR}/test_wan_e2e.c)
target_link_libraries(test_wan_e2e PRIVATE weft_testsupport weft_modelfiles weft
  Threads::Threads m)
add_test(NAME e2e_wan COMMAND test_wan_e2e $<TARGET_FILE:weftd> ${WEFT_TESTS_DIR}/fixtures)
set_tests_properties(e2e_wan PROPERTIES TIMEOUT 120)

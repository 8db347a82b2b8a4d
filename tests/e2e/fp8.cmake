# fp8 through real daemons (test_fp8_e2e.c): see unit/fp8.cmake's comment.
add_executable(test_fp8_e2e ${CMAKE_CURRENT_LIST_DIR}/test_fp8_e2e.c)
target_link_libraries(test_fp8_e2e PRIVATE weft_clusterd weft_fluxio weft_testsupport
                      weft_proto weft_kernels weft PkgConfig::ZMQ Threads::Threads m)
add_test(NAME e2e_fp8 COMMAND test_fp8_e2e $<TARGET_FILE:weftd>
  $<TARGET_FILE:weftd_standin> ${WEFT_TESTS_DIR}/fixtures $<TARGET_FILE:weftctl>)
set_tests_properties(e2e_fp8 PROPERTIES TIMEOUT 180)

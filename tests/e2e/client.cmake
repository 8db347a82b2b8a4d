# libweft end to end: tests/e2e/test_client.c drives a real weftd through the
# library (its first job held by the test hook WEFT_TEST_HOLD_JOBS);
# tests/e2e/test_weftctl.sh checks weftctl's output and exit codes.
add_executable(test_client ${CMAKE_CURRENT_LIST_DIR}/test_client.c)
target_link_libraries(test_client PRIVATE weft_testsupport weft Threads::Threads m)
target_compile_options(test_client PRIVATE -O2)
add_test(NAME e2e_client COMMAND test_client $<TARGET_FILE:weftd>)
set_tests_properties(e2e_client PROPERTIES TIMEOUT 180)

add_test(NAME e2e_weftctl
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_weftctl.sh
                 $<TARGET_FILE:weftd> $<TARGET_FILE:weftctl>)
set_tests_properties(e2e_weftctl PROPERTIES TIMEOUT 120)

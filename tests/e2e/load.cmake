# Load with kills: 16 client processes x 200 checked attention jobs, 2 of
# them SIGKILLed mid-stream, 5 live reconfigurations, one weftd cpu:2
# (tests/e2e/test_load_kills.c; bench/load_kills.sh runs a longer one).
add_executable(test_load_kills ${CMAKE_CURRENT_LIST_DIR}/test_load_kills.c)
target_include_directories(test_load_kills PRIVATE ${WEFT_TESTS_DIR})
target_link_libraries(test_load_kills PRIVATE weft_testsupport weft Threads::Threads m)
target_compile_options(test_load_kills PRIVATE -O2)
add_test(NAME e2e_load_kills COMMAND test_load_kills $<TARGET_FILE:weftd>)
set_tests_properties(e2e_load_kills PROPERTIES TIMEOUT 300)

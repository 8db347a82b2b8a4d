# weftd's modules on their own: the settings table (test_config.c).
add_executable(test_config ${CMAKE_CURRENT_LIST_DIR}/test_config.c)
target_link_libraries(test_config PRIVATE weftd_core)
add_test(NAME daemon_config COMMAND test_config)
# escaping of untrusted text (proto/errf.h) and the logger that applies it
add_executable(test_escape ${CMAKE_CURRENT_LIST_DIR}/test_escape.c)
target_link_libraries(test_escape PRIVATE weftd_core)
add_test(NAME escape COMMAND test_escape)
# CURVE key files, allow-lists and the ZAP handler over real sockets.
add_executable(test_auth ${CMAKE_CURRENT_LIST_DIR}/test_auth.c)
target_include_directories(test_auth PRIVATE ${WEFT_TESTS_DIR})
target_link_libraries(test_auth PRIVATE weftd_core)
add_test(NAME auth COMMAND test_auth)


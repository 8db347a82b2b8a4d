# weftd: the settings table (unit, tests/test_config.c) and a real daemon
# driven over real ZeroMQ sockets (end-to-end, tests/test_daemon.c).
add_executable(test_config ${CMAKE_CURRENT_LIST_DIR}/test_config.c)
target_link_libraries(test_config PRIVATE weftd_core)
add_test(NAME daemon_config COMMAND test_config)
# escaping of untrusted text (proto/errf.h) and the logger that applies it
add_executable(test_escape ${CMAKE_CURRENT_LIST_DIR}/test_escape.c)
target_link_libraries(test_escape PRIVATE weftd_core)
add_test(NAME escape COMMAND test_escape)
# CURVE key files, allow-lists and the ZAP handler over real sockets.
add_executable(test_auth ${CMAKE_CURRENT_LIST_DIR}/test_auth.c)
target_include_directories(test_auth PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(test_auth PRIVATE weftd_core)
add_test(NAME auth COMMAND test_auth)

# Support for raw-ZeroMQ end-to-end tests: daemon start, notify, requests.
add_library(weft_rawd STATIC ${CMAKE_CURRENT_LIST_DIR}/support/rawd.c)
target_include_directories(weft_rawd PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(weft_rawd PUBLIC weft_proto PkgConfig::ZMQ Threads::Threads m)

add_executable(test_daemon ${CMAKE_CURRENT_LIST_DIR}/test_daemon.c)
target_link_libraries(test_daemon PRIVATE weft_rawd)
add_test(NAME e2e_daemon COMMAND test_daemon $<TARGET_FILE:weftd>)
set_tests_properties(e2e_daemon PROPERTIES TIMEOUT 300)

# Mesh and hot reconfiguration basics on a real daemon (cpu:4): status
# coordinates, dp replicas in parallel, reconfigure / busy / invalid,
# SIGHUP with a new mesh (tests/test_reconfig_basic.c).
add_executable(test_reconfig_basic ${CMAKE_CURRENT_LIST_DIR}/test_reconfig_basic.c)
target_link_libraries(test_reconfig_basic PRIVATE weft_rawd)
add_test(NAME e2e_reconfig_basic COMMAND test_reconfig_basic $<TARGET_FILE:weftd>)
set_tests_properties(e2e_reconfig_basic PROPERTIES TIMEOUT 300)

# Socket activation (units/weftd.socket) under systemd-socket-activate:
# hello and a job through the inherited socket, SIGTERM, two sockets
# refused (tests/test_socket_activation.c); skipped without the tool.
add_executable(test_socket_activation ${CMAKE_CURRENT_LIST_DIR}/test_socket_activation.c)
target_link_libraries(test_socket_activation PRIVATE weft_rawd)
add_test(NAME e2e_socket_activation COMMAND test_socket_activation $<TARGET_FILE:weftd>)
set_tests_properties(e2e_socket_activation PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)

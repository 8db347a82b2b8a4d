# A real daemon driven over real ZeroMQ sockets (test_daemon.c).
add_executable(test_daemon ${CMAKE_CURRENT_LIST_DIR}/test_daemon.c)
target_link_libraries(test_daemon PRIVATE weft_rawd)
add_test(NAME e2e_daemon COMMAND test_daemon $<TARGET_FILE:weftd>)
set_tests_properties(e2e_daemon PROPERTIES TIMEOUT 300)

# Mesh and hot reconfiguration basics on a real daemon (cpu:4): status
# coordinates, dp replicas in parallel, reconfigure / busy / invalid,
# SIGHUP with a new mesh (tests/e2e/test_reconfig_basic.c).
add_executable(test_reconfig_basic ${CMAKE_CURRENT_LIST_DIR}/test_reconfig_basic.c)
target_link_libraries(test_reconfig_basic PRIVATE weft_rawd)
add_test(NAME e2e_reconfig_basic COMMAND test_reconfig_basic $<TARGET_FILE:weftd>)
set_tests_properties(e2e_reconfig_basic PROPERTIES TIMEOUT 300)

# Socket activation (units/weftd.socket) under systemd-socket-activate:
# hello and a job through the inherited socket, SIGTERM, two sockets
# refused (tests/e2e/test_socket_activation.c); skipped without the tool.
add_executable(test_socket_activation ${CMAKE_CURRENT_LIST_DIR}/test_socket_activation.c)
target_link_libraries(test_socket_activation PRIVATE weft_rawd)
add_test(NAME e2e_socket_activation COMMAND test_socket_activation $<TARGET_FILE:weftd>)
set_tests_properties(e2e_socket_activation PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)

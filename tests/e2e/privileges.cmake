# The ipc:// socket file's mode and group (socket_mode, socket_group) and,
# run as root, the switch to `user = nobody` after binding: every task's
# credentials, a root client still served (tests/e2e/test_privileges.c). Not
# root: the file checks run, then the test reports itself skipped.
add_executable(test_privileges ${CMAKE_CURRENT_LIST_DIR}/test_privileges.c)
target_link_libraries(test_privileges PRIVATE weft_rawd)
add_test(NAME e2e_privileges COMMAND test_privileges $<TARGET_FILE:weftd>)
set_tests_properties(e2e_privileges PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)

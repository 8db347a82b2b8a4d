# The client plane against real daemons (tests/e2e/test_client_auth.c): CURVE
# on tcp:// (no keys, unknown key, wrong server key: WF_E_AUTH at once;
# submit refused reconfigure / load / unload with WF_E_DENIED beside an
# admin's jobs; SIGHUP re-reads client_keys), the protected mode of an
# anonymous tcp:// endpoint, and ipc:// roles by peer uid (root only:
# skipped otherwise).
add_executable(test_client_auth ${CMAKE_CURRENT_LIST_DIR}/test_client_auth.c)
target_link_libraries(test_client_auth PRIVATE weft_clusterd weft_testsupport
                      weft_proto weft Threads::Threads m)
add_test(NAME e2e_client_auth COMMAND test_client_auth $<TARGET_FILE:weftd> curve)
set_tests_properties(e2e_client_auth PROPERTIES TIMEOUT 180)
add_test(NAME e2e_client_auth_ipc COMMAND test_client_auth $<TARGET_FILE:weftd> ipc)
set_tests_properties(e2e_client_auth_ipc PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)

# The end of a drain seen by libweft clients that keep sending through a
# SIGTERM: one outcome per request (a reply or WF_E_CONN_CLOSED), none
# left for its timeout, the daemon's count of requests read and replies
# written against the replies received (tests/e2e/test_shutdown.c).
add_executable(test_shutdown ${CMAKE_CURRENT_LIST_DIR}/test_shutdown.c)
target_link_libraries(test_shutdown PRIVATE weft_spawn weft Threads::Threads)
add_test(NAME e2e_shutdown COMMAND test_shutdown $<TARGET_FILE:weftd>)
set_tests_properties(e2e_shutdown PROPERTIES TIMEOUT 300)

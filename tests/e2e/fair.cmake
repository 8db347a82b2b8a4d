# Per-client shares of the queue and the bound on unread replies on a real
# daemon (tests/e2e/test_fair.c): two clients competing for the queue, and
# two CURVE connections of one key, with the jobs held on the devices
# (WEFT_TEST_HOLD_JOBS) so that the queue is full when the test says so; a
# client that never reads its replies, with the daemon's peak RSS against
# what PROTOCOL.md 7.1 lets it hold.
add_executable(test_fair ${CMAKE_CURRENT_LIST_DIR}/test_fair.c)
target_link_libraries(test_fair PRIVATE weft_rawd)
add_test(NAME e2e_fair COMMAND test_fair $<TARGET_FILE:weftd>)
set_tests_properties(e2e_fair PROPERTIES TIMEOUT 300)

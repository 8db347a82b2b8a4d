# The scheduler (daemon/runtime/scheduler.c) on its own, with workers that
# are never started (tests/unit/test_scheduler.c): admission, queue bound,
# sequence-order dispatch, replicas, pause / re-plan, cluster hooks.
add_executable(test_scheduler ${CMAKE_CURRENT_LIST_DIR}/test_scheduler.c)
target_link_libraries(test_scheduler PRIVATE weftd_core)
add_test(NAME scheduler COMMAND test_scheduler)

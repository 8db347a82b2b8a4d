# Time limits of jobs on a real daemon through libweft over CURVE
# (tests/e2e/test_time.c), with every job part held at its start
# (WEFT_TEST_HOLD_JOBS) so that "running" and "queued" are states the test
# makes: max_job_flops refuses the (1, 2^24, 1, 1) job; a ring=2 job past
# its deadline_ms (or job_timeout_ms) fails with WF_E_DEADLINE, not before
# the deadline, and the next job is right; cancel of a running and of a
# queued job (WF_E_CANCELLED); a submit client cannot cancel another's
# job, an admin can; a reconfigure blocked by a held job gives up after
# reconfigure_timeout_ms (WF_E_BUSY) and the old mesh serves; a queued
# forward past its deadline_ms ends WF_E_DEADLINE; the admin's `weftctl
# cancel ID` stops another client's running job (WF_E_CANCELLED).
add_executable(test_time ${CMAKE_CURRENT_LIST_DIR}/test_time.c)
target_link_libraries(test_time PRIVATE weft_clusterd weft_fluxio weft_testsupport
                      weft_proto weft PkgConfig::ZMQ Threads::Threads m)
add_test(NAME e2e_time COMMAND test_time $<TARGET_FILE:weftd>
  ${WEFT_TESTS_DIR}/fixtures $<TARGET_FILE:weftctl>)
set_tests_properties(e2e_time PROPERTIES TIMEOUT 180)

# The operators' counters against a real weftd (tests/e2e/test_metrics.c): the
# Prometheus endpoint on metrics_listen (GET /metrics by hand over a
# socket: 200, text format 0.0.4, values after jobs, a refusal and a
# reconfiguration; 404 / 405; a non-loopback address refused without
# allow_anonymous), the same counters in status and `weftctl status`.
# Needs a weftd built with libmicrohttpd (.ci/deps installs it).
if(WEFT_HAVE_MHD)
  add_executable(test_metrics ${CMAKE_CURRENT_LIST_DIR}/test_metrics.c)
  target_link_libraries(test_metrics PRIVATE weft_clusterd weft_testsupport
                        weft_proto weft Threads::Threads m)
  add_test(NAME e2e_metrics COMMAND test_metrics $<TARGET_FILE:weftd>
           $<TARGET_FILE:weftctl>)
  set_tests_properties(e2e_metrics PROPERTIES TIMEOUT 180)
endif()

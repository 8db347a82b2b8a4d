# A Wan model in a real weftd cpu:4 (tests/e2e/test_wan_e2e.c): loaded
# through libweft, its forward through wf_forward_named against diffusers'
# float64 output. e2e_wan: wan-tiny on dp, ring, ulysses and ring x
# ulysses meshes, tp 2 and a bad shape refused. e2e_wan_long: wan-long's
# 8,192 video tokens on ring 2 x ulysses 2, ring 4, ulysses 2 and ring 2
# (about 0.1 s a forward; under a second in all).
add_executable(test_wan_e2e ${CMAKE_CURRENT_LIST_DIR}/test_wan_e2e.c)
target_link_libraries(test_wan_e2e PRIVATE weft_fluxio weft_testsupport weft_modelfiles weft
  Threads::Threads m)
add_test(NAME e2e_wan COMMAND test_wan_e2e $<TARGET_FILE:weftd> ${WEFT_TESTS_DIR}/fixtures tiny)
set_tests_properties(e2e_wan PROPERTIES TIMEOUT 120)
add_test(NAME e2e_wan_long COMMAND test_wan_e2e $<TARGET_FILE:weftd> ${WEFT_TESTS_DIR}/fixtures
  long)
set_tests_properties(e2e_wan_long PROPERTIES TIMEOUT 180)

# split_batch (tests/e2e/test_split_batch.c): flux-tiny and wan-tiny in a
# weftd cpu:4, their batch split over the dp replicas on dp 2 (x ulysses,
# ring, tp) and dp 4, against diffusers' float64 output and the unsplit
# forward, the devices that served each.
add_executable(test_split_batch ${CMAKE_CURRENT_LIST_DIR}/test_split_batch.c)
target_link_libraries(test_split_batch PRIVATE weft_fluxio weft_testsupport weft_modelfiles
  weft Threads::Threads m)
add_test(NAME e2e_split_batch COMMAND test_split_batch $<TARGET_FILE:weftd>
  ${WEFT_TESTS_DIR}/fixtures)
set_tests_properties(e2e_split_batch PROPERTIES TIMEOUT 120)

# Denoising sessions and the first-block cache (tests/e2e/test_sessions.c):
# flux-tiny and wan-tiny in a weftd cpu:4 on four meshes: threshold 0
# bit-identical to a forward without a session, reuse on unchanged and
# changed inputs, a session started over, end_session's counts, the state
# dropped by a reconfiguration, session_max and session_idle_ms.
add_executable(test_sessions ${CMAKE_CURRENT_LIST_DIR}/test_sessions.c)
target_link_libraries(test_sessions PRIVATE weft_fluxio weft_testsupport weft_modelfiles
  weft Threads::Threads m)
add_test(NAME e2e_sessions COMMAND test_sessions $<TARGET_FILE:weftd>
  ${WEFT_TESTS_DIR}/fixtures)
set_tests_properties(e2e_sessions PROPERTIES TIMEOUT 120)

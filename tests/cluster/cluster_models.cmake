# Resident models in a cluster (tests/cluster/test_cluster_models.c): 3 weftd
# processes (cpu:2 each) with their own model roots: a load on the
# coordinator resident on every node (list_models names the nodes and
# ranks), files that differ on one node refused naming it (WF_E_MISMATCH),
# loads on members refused, forwards across nodes (tp=2 x ring=3,
# ulysses=6, dp=3 x tp=2, tp=2 x ulysses=3) against diffusers and a
# single-node weftd, Wan (wan-tiny) loaded on every node and served on
# ring=3 x ulysses=2, ring=6 and dp=3 x ulysses=2 against diffusers (tp 2
# refused while it is resident), unload everywhere, a member that does
# not answer within cluster_timeout_ms, a node lost with a forward held on it
# (WEFT_TEST_HOLD_JOBS: WF_E_NODE_LOST, the forward queued behind it served
# on the smaller world) and restarted (the models re-installed there), the
# coordinator restarted. ~10 s.
add_executable(test_cluster_models ${CMAKE_CURRENT_LIST_DIR}/test_cluster_models.c)
target_link_libraries(test_cluster_models PRIVATE weft_clusterd weft_fluxio weft
  Threads::Threads m)
target_compile_options(test_cluster_models PRIVATE -O2)
add_test(NAME e2e_cluster_models COMMAND test_cluster_models $<TARGET_FILE:weftd>
  ${WEFT_TESTS_DIR}/fixtures)
set_tests_properties(e2e_cluster_models PROPERTIES TIMEOUT 180)

# End to end (tests/cluster/test_nccl_cluster.c): three weftd_ncclsi processes
# (the stand-in device backend and the NCCL stand-in, linked in place of
# comm_nccl_api.c) form an NCCL world through the rendezvous; attention
# across them against the fp64 reference; a member killed with a job held
# on it (WEFT_TEST_HOLD_JOBS; WF_E_NODE_LOST), the smaller NCCL world
# (shrunk, or from a new id); a rejoin
# without "gpu" (WEFT_NCCL=0) makes a mixed world on comm_zmq.
add_executable(weftd_ncclsi ${WEFT_TESTS_DIR}/support/weftd_ncclsi.c)
target_link_libraries(weftd_ncclsi PRIVATE weft_ncclsi weft_standin weftd_core)
add_executable(test_nccl_cluster ${CMAKE_CURRENT_LIST_DIR}/test_nccl_cluster.c)
target_link_libraries(test_nccl_cluster PRIVATE weft_clusterd weft_testsupport weft
                      Threads::Threads m)
target_compile_options(test_nccl_cluster PRIVATE -O2)
add_test(NAME e2e_nccl_cluster COMMAND test_nccl_cluster $<TARGET_FILE:weftd_ncclsi>)
set_tests_properties(e2e_nccl_cluster PROPERTIES TIMEOUT 180)

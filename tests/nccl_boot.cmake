# NCCL across nodes, bootstrapped by the rendezvous (daemon/comm/
# comm_nccl_boot.h), without a GPU: the id in the world message, a fresh id
# per epoch, the split colours, the data plane's choice, shrink vs
# rebuild, against the NCCL stand-in (tests/support/nccl_standin.c:
# NCCL's bootstrap over ZeroMQ, comm_zmq worlds) with ranks in threads
# (tests/test_nccl_boot.c).
add_library(weft_ncclsi STATIC ${CMAKE_CURRENT_LIST_DIR}/support/nccl_standin.c)
target_include_directories(weft_ncclsi PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(weft_ncclsi PUBLIC weftd_core)

add_executable(test_nccl_boot ${CMAKE_CURRENT_LIST_DIR}/test_nccl_boot.c)
target_link_libraries(test_nccl_boot PRIVATE weft_ncclsi weftd_core Threads::Threads)
add_test(NAME nccl_boot COMMAND test_nccl_boot)
set_tests_properties(nccl_boot PROPERTIES TIMEOUT 120)

# End to end (tests/test_nccl_cluster.c): three weftd_ncclsi processes
# (the stand-in device backend and the NCCL stand-in, linked in place of
# comm_nccl_api.c) form an NCCL world through the rendezvous; attention
# across them against the fp64 reference; a member killed mid-job
# (WF_E_NODE_LOST), the smaller NCCL world from a new id; a rejoin
# without "gpu" (WEFT_NCCL=0) makes a mixed world on comm_zmq.
add_executable(weftd_ncclsi ${CMAKE_CURRENT_LIST_DIR}/support/weftd_ncclsi.c)
target_link_libraries(weftd_ncclsi PRIVATE weft_ncclsi weft_standin weftd_core)
add_executable(test_nccl_cluster ${CMAKE_CURRENT_LIST_DIR}/test_nccl_cluster.c)
target_link_libraries(test_nccl_cluster PRIVATE weft_clusterd weft_testsupport weft
                      Threads::Threads m)
target_compile_options(test_nccl_cluster PRIVATE -O2)
add_test(NAME e2e_nccl_cluster COMMAND test_nccl_cluster $<TARGET_FILE:weftd_ncclsi>)
set_tests_properties(e2e_nccl_cluster PROPERTIES TIMEOUT 180)

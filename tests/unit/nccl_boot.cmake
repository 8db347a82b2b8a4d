# NCCL across nodes, bootstrapped by the rendezvous (daemon/comm/
# comm_nccl_boot.h), without a GPU: the id in the world message, a fresh id
# per epoch, the split colours, the data plane's choice, shrink vs
# rebuild, against the NCCL stand-in (tests/support/nccl_standin.c:
# NCCL's bootstrap over ZeroMQ, comm_zmq worlds) with ranks in threads
# (tests/unit/test_nccl_boot.c).
add_executable(test_nccl_boot ${CMAKE_CURRENT_LIST_DIR}/test_nccl_boot.c)
target_link_libraries(test_nccl_boot PRIVATE weft_ncclsi weftd_core Threads::Threads)
add_test(NAME nccl_boot COMMAND test_nccl_boot)
set_tests_properties(nccl_boot PROPERTIES TIMEOUT 120)


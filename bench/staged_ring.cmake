# bench_staged_ring: ring attention with alltoall rotation, the staged
# comm's overlapped transfers against its synchronous staging (and the
# allgather rotation), in the mixed mode on one GPU, over NCCL where R GPUs
# exist, and on the tests' stand-in device (the code path on a CPU).
# tests/gpu/staged_ring.sh runs it on the GPU. Not run by CTest.
add_executable(bench_staged_ring ${CMAKE_CURRENT_LIST_DIR}/bench_staged_ring.c)
target_link_libraries(bench_staged_ring PRIVATE weftd_core Threads::Threads)
if(TARGET weft_standin)
  target_link_libraries(bench_staged_ring PRIVATE weft_standin)
  target_compile_definitions(bench_staged_ring PRIVATE WEFT_BENCH_STANDIN=1)
endif()

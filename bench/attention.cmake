# bench_attention: CPU attention GFLOP/s against OpenBLAS sgemm GFLOP/s
# measured in the same run (1 and 2 threads). Not run by CTest.
add_executable(bench_attention ${CMAKE_CURRENT_LIST_DIR}/bench_attention.c)
target_link_libraries(bench_attention PRIVATE weft_kernels Threads::Threads)
target_compile_options(bench_attention PRIVATE -O2)

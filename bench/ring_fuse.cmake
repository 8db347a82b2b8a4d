# bench_ring_fuse: ring steps merged in the attention kernel (backend.h
# merge mode) against attention + lse_merge + convert, on the CPU backend
# (`cpu`) or the CUDA backend (`cuda`, mixed mode: two contexts of GPU 0
# behind a staged host comm). Not run by CTest.
add_executable(bench_ring_fuse ${CMAKE_CURRENT_LIST_DIR}/bench_ring_fuse.c)
target_link_libraries(bench_ring_fuse PRIVATE weftd_core weft_kernels Threads::Threads m)
target_compile_options(bench_ring_fuse PRIVATE -O2)

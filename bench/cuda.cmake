# bench_cuda_attention: TFLOP/s of the CUDA attention kernel on one shape,
# compared by tests/gpu/run.sh with torch's SDPA. Built with CUDA only.
if(WEFT_HAVE_CUDA)
  add_executable(bench_cuda_attention ${CMAKE_CURRENT_LIST_DIR}/bench_cuda_attention.c)
  target_link_libraries(bench_cuda_attention PRIVATE weft_kernels)
endif()

# CUDA backend and NCCL comm backend. cuda_host: their host-side logic,
# no GPU needed (tests/unit/test_cuda_host.c). cuda_gpu: the kernels against
# the CPU backend and NCCL with a world of 1 (and N), on a GPU; exits 77
# (skipped) where cudaGetDeviceCount fails.
if(WEFT_HAVE_CUDA)
  add_executable(test_cuda_host ${CMAKE_CURRENT_LIST_DIR}/test_cuda_host.c)
  target_link_libraries(test_cuda_host PRIVATE weft_cuda_plan)
  if(WEFT_HAVE_NCCL)
    target_link_libraries(test_cuda_host PRIVATE weftd_core)
    target_compile_definitions(test_cuda_host PRIVATE WEFT_TEST_NCCL=1)
  else()
    target_compile_definitions(test_cuda_host PRIVATE WEFT_TEST_NCCL=0)
  endif()
  add_test(NAME cuda_host COMMAND test_cuda_host)

endif()

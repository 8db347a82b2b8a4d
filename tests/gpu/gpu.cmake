# cuda_gpu: the CUDA kernels against the CPU backend and NCCL with a world
# of 1 (and N), on a GPU; exits 77 (skipped) where cudaGetDeviceCount fails.
if(WEFT_HAVE_CUDA)
  add_executable(test_cuda_gpu ${CMAKE_CURRENT_LIST_DIR}/test_cuda_gpu.c)
  target_link_libraries(test_cuda_gpu PRIVATE weft_kernels weftd_core CUDA::cudart m)
  target_compile_options(test_cuda_gpu PRIVATE -O2)
  if(WEFT_HAVE_NCCL)
    target_compile_definitions(test_cuda_gpu PRIVATE WEFT_TEST_NCCL=1)
  else()
    target_compile_definitions(test_cuda_gpu PRIVATE WEFT_TEST_NCCL=0)
  endif()
  add_test(NAME cuda_gpu COMMAND test_cuda_gpu)
  set_tests_properties(cuda_gpu PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
endif()

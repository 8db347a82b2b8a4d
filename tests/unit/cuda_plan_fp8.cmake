# The fp8 attention kernel's host side: which devices take fp8
# jobs, the geometry's selection and refusals, shared memory, the
# workspace of the quantized copies, the quantizer's grid and v8t's key
# order against the P fragment. Plain C against weft_cuda_plan: runs in
# every build, with or without CUDA.
add_executable(test_cuda_plan_fp8 ${CMAKE_CURRENT_LIST_DIR}/test_cuda_plan_fp8.c)
target_link_libraries(test_cuda_plan_fp8 PRIVATE weft_cuda_plan)
add_test(NAME cuda_plan_fp8 COMMAND test_cuda_plan_fp8)

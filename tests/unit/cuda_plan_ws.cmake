# The warp-specialized attention kernel's host side: kernel
# selection (the cuda_attention setting's values, the plan's fields), launch geometry,
# shared-memory and register budgets, refusals. Plain C against
# weft_cuda_plan: runs in every build, with or without CUDA.
add_executable(test_cuda_plan_ws ${CMAKE_CURRENT_LIST_DIR}/test_cuda_plan_ws.c)
target_link_libraries(test_cuda_plan_ws PRIVATE weft_cuda_plan)
add_test(NAME cuda_plan_ws COMMAND test_cuda_plan_ws)

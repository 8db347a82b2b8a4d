# The CUDA backend's cache of captured graphs (kernels/cuda/graph_cache.c):
# first sight, capture, replay, refusal, the bound, the drops. Plain C
# against weft_cuda_plan: runs in every build, with or without CUDA.
add_executable(test_graph_cache ${CMAKE_CURRENT_LIST_DIR}/test_graph_cache.c)
target_link_libraries(test_graph_cache PRIVATE weft_cuda_plan)
add_test(NAME graph_cache COMMAND test_graph_cache)

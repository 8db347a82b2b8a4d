# Context-parallel attention on real threads with the host comm: every
# mesh shape, rotate method, merge mode and dtype against fp64; device
# mode on the stand-in device behind the staged comm.
add_executable(test_cp_attention ${CMAKE_CURRENT_LIST_DIR}/test_cp_attention.c
  ${WEFT_TESTS_DIR}/support/cp_groups.c)
target_link_libraries(test_cp_attention PRIVATE weftd_core weft_standin m)
add_test(NAME cp_attention COMMAND test_cp_attention)
set_tests_properties(cp_attention PROPERTIES TIMEOUT 300)

# The LSE merge of ring steps in the kernel (backend.h merge mode):
# the CPU backend's merge mode bit for bit against attention +
# wf_lse_merge_rows, and ring runs fused vs unfused (CPU and stand-in).
add_executable(test_cp_fused ${CMAKE_CURRENT_LIST_DIR}/test_cp_fused.c
  ${WEFT_TESTS_DIR}/support/cp_groups.c)
target_link_libraries(test_cp_fused PRIVATE weftd_core weft_standin weft_cuda_plan m)
add_test(NAME cp_fused COMMAND test_cp_fused)
set_tests_properties(cp_fused PROPERTIES TIMEOUT 300)

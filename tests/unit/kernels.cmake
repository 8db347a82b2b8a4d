# kernels: dtype conversions and the CPU attention backend against an fp64
# reference (tests/unit/test_kernels.c).
add_executable(test_kernels ${CMAKE_CURRENT_LIST_DIR}/test_kernels.c)
target_include_directories(test_kernels PRIVATE ${PROJECT_SOURCE_DIR}/kernels/cpu)
target_link_libraries(test_kernels PRIVATE weft_kernels Threads::Threads m)
target_compile_options(test_kernels PRIVATE -O2)
add_test(NAME kernels COMMAND test_kernels)
set_tests_properties(kernels PROPERTIES TIMEOUT 300)

# kernels: the CPU backend's model ops (linear, activations, norms, RoPE,
# timestep projection, copies) against fp64 references
# (tests/unit/test_model_ops.c).
add_executable(test_model_ops ${CMAKE_CURRENT_LIST_DIR}/test_model_ops.c)
target_include_directories(test_model_ops PRIVATE ${WEFT_TESTS_DIR})
target_link_libraries(test_model_ops PRIVATE weft_kernels m)
target_compile_options(test_model_ops PRIVATE -O2)
add_test(NAME model_ops COMMAND test_model_ops)
set_tests_properties(model_ops PROPERTIES TIMEOUT 300)

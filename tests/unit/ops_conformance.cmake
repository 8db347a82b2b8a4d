# ops_conformance: every op of backend.h's wf_backend_op_t on every
# backend, one table (tests/unit/test_ops_conformance.c): the CPU backend
# against fp64 references, the stand-in device backend against the CPU bit
# for bit. cuda_ops_conformance: the CUDA rows (--cuda), against the same
# references; exits 77 (skipped) without CUDA or a GPU.
add_executable(test_ops_conformance ${CMAKE_CURRENT_LIST_DIR}/test_ops_conformance.c)
target_link_libraries(test_ops_conformance PRIVATE weft_standin m)
target_compile_options(test_ops_conformance PRIVATE -O2)
add_test(NAME ops_conformance COMMAND test_ops_conformance)
set_tests_properties(ops_conformance PROPERTIES TIMEOUT 120)
add_test(NAME cuda_ops_conformance COMMAND test_ops_conformance --cuda)
set_tests_properties(cuda_ops_conformance PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)

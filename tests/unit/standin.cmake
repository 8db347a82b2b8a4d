# The stand-in device backend (support/standin_dev.c): its model ops
# against the CPU backend's, bit for bit, on scrambled memory; its pointer
# checks and resident memory (tests/unit/test_standin_ops.c).
add_executable(test_standin_ops ${CMAKE_CURRENT_LIST_DIR}/test_standin_ops.c)
target_link_libraries(test_standin_ops PRIVATE weft_standin m)
add_test(NAME standin_ops COMMAND test_standin_ops)
set_tests_properties(standin_ops PROPERTIES TIMEOUT 120)

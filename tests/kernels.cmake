# kernels: dtype conversions and the CPU attention backend against an fp64
# reference (tests/test_kernels.c).
add_executable(test_kernels ${CMAKE_CURRENT_LIST_DIR}/test_kernels.c)
target_include_directories(test_kernels PRIVATE ${PROJECT_SOURCE_DIR}/kernels/cpu)
target_link_libraries(test_kernels PRIVATE weft_kernels Threads::Threads m)
target_compile_options(test_kernels PRIVATE -O2)
add_test(NAME kernels COMMAND test_kernels)
set_tests_properties(kernels PROPERTIES TIMEOUT 300)

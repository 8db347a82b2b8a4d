# Non-finite inputs and extreme scales end to end: tests/e2e/test_numerics.c
# drives a real weftd (ring = 2, then ulysses = 2) through libweft and
# compares every job with the fp64 reference.
add_executable(test_numerics ${CMAKE_CURRENT_LIST_DIR}/test_numerics.c)
target_link_libraries(test_numerics PRIVATE weft_testsupport weft m)
add_test(NAME e2e_numerics COMMAND test_numerics $<TARGET_FILE:weftd>)
set_tests_properties(e2e_numerics PROPERTIES TIMEOUT 120)

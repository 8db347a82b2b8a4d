# fp8 attention, host side: test_fp8 checks kernels/fp8.h
# (every code, the rounding against a brute force), the fp8 reference
# (reference.h) and the wire's `precision` / "fp8" keys without a daemon;
# test_fp8_e2e drives real daemons: a CPU weftd refuses fp8 attention and
# forward with WF_E_UNSUPPORTED and serves the next job, weftd_standin
# (fp8 emulated) serves them against the fp8 reference, a cluster with a
# CPU node refuses them, libweft refuses locally against a peer without
# the feature.
add_executable(test_fp8 ${CMAKE_CURRENT_LIST_DIR}/test_fp8.c)
target_include_directories(test_fp8 PRIVATE ${WEFT_TESTS_DIR})
target_link_libraries(test_fp8 PRIVATE weft_proto weft_kernels m)
add_test(NAME fp8 COMMAND test_fp8)


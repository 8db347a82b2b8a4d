# Client benchmarks (not run by CTest), each against a baseline measured in
# the same run: bench_roundtrip (tiny job beside a raw ZeroMQ echo) and
# bench_submit (256 MiB job beside memcpy). Both take the weftd path.
add_executable(bench_roundtrip ${CMAKE_CURRENT_LIST_DIR}/bench_roundtrip.c)
# weft_proto: the echo baseline sends the very header libweft encodes.
target_link_libraries(bench_roundtrip PRIVATE weft weft_proto PkgConfig::ZMQ
                      Threads::Threads m)
target_compile_options(bench_roundtrip PRIVATE -O2)

add_executable(bench_submit ${CMAKE_CURRENT_LIST_DIR}/bench_submit.c)
target_link_libraries(bench_submit PRIVATE weft PkgConfig::ZMQ Threads::Threads m)
target_compile_options(bench_submit PRIVATE -O2)

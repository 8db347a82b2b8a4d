# bench_cluster: time to form a world of 3 weftd daemons on loopback,
# beside one daemon's start-up in the same run.
add_executable(bench_cluster ${CMAKE_CURRENT_LIST_DIR}/bench_cluster.c)
target_compile_options(bench_cluster PRIVATE -O2)

# bench_cluster: time to form a world of 3 weftd daemons on loopback,
# beside one daemon's start-up in the same run; ring attention (ring=6)
# across 3 daemons beside the same mesh inside one daemon; the comm_zmq
# data plane's ring steps, plain beside CURVE (weftd_core: comm_zmq, ZAP).
add_executable(bench_cluster ${CMAKE_CURRENT_LIST_DIR}/bench_cluster.c)
target_link_libraries(bench_cluster PRIVATE weft weftd_core)
target_compile_options(bench_cluster PRIVATE -O2)

# bench_status (not run by CTest): status latency p50 / p99 / max under 64
# clients submitting attention jobs back to back;
# --metrics adds the GET /metrics latency of the metrics_listen endpoint.
add_executable(bench_status ${CMAKE_CURRENT_LIST_DIR}/bench_status.c)
target_link_libraries(bench_status PRIVATE weft Threads::Threads)
target_compile_options(bench_status PRIVATE -O2)

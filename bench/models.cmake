# bench_models: checkpoint load beside read(2) of the same bytes, forward
# time per mesh beside one device, live re-shard beside unload + load.
add_executable(bench_models ${CMAKE_CURRENT_LIST_DIR}/bench_models.c)
target_link_libraries(bench_models PRIVATE weft weftd_core m)
target_compile_options(bench_models PRIVATE -O2)

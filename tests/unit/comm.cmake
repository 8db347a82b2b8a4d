# The mesh (rank layout, groups, parsing; tests/unit/test_mesh.c) and the host
# comm backend op by op, with uneven sizes, splits and abort of ranks seen
# blocked (tests/unit/test_comm.c). Both link the daemon's modules.
add_executable(test_mesh ${CMAKE_CURRENT_LIST_DIR}/test_mesh.c)
target_link_libraries(test_mesh PRIVATE weftd_core)
add_test(NAME mesh COMMAND test_mesh)


add_executable(test_comm ${CMAKE_CURRENT_LIST_DIR}/test_comm.c)
target_link_libraries(test_comm PRIVATE weft_commcheck weftd_core)
add_test(NAME comm COMMAND test_comm)
set_tests_properties(comm PROPERTIES TIMEOUT 300)

# The staged comm (daemon/comm/comm_staged.c) over the host comm, on stand-in
# device buffers (tests/unit/test_comm_staged.c).
add_executable(test_comm_staged ${CMAKE_CURRENT_LIST_DIR}/test_comm_staged.c)
target_link_libraries(test_comm_staged PRIVATE weftd_core weft_standin)
add_test(NAME comm_staged COMMAND test_comm_staged)
set_tests_properties(comm_staged PROPERTIES TIMEOUT 300)

# The point-to-point plans comm_nccl and comm_zmq run
# (daemon/comm/p2p_plan.c), simulated rank against rank; pure, so in every
# build (tests/unit/test_p2p_plan.c).
add_executable(test_p2p_plan ${CMAKE_CURRENT_LIST_DIR}/test_p2p_plan.c)
target_link_libraries(test_p2p_plan PRIVATE weftd_core)
add_test(NAME comm_p2p_plan COMMAND test_p2p_plan)

# The request pool and group-call list of the host and zmq backends
# (daemon/comm/request_pool.c; tests/unit/test_request_pool.c).
add_executable(test_request_pool ${CMAKE_CURRENT_LIST_DIR}/test_request_pool.c)
target_link_libraries(test_request_pool PRIVATE weftd_core)
add_test(NAME comm_request_pool COMMAND test_request_pool)

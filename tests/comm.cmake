# The mesh (rank layout, groups, parsing; tests/test_mesh.c) and the host
# comm backend op by op, with uneven sizes, splits and abort
# (tests/test_comm.c). Both link the daemon's modules.
add_executable(test_mesh ${CMAKE_CURRENT_LIST_DIR}/test_mesh.c)
target_link_libraries(test_mesh PRIVATE weftd_core)
add_test(NAME mesh COMMAND test_mesh)

add_executable(test_comm ${CMAKE_CURRENT_LIST_DIR}/test_comm.c)
target_link_libraries(test_comm PRIVATE weftd_core)
add_test(NAME comm COMMAND test_comm)
set_tests_properties(comm PROPERTIES TIMEOUT 300)

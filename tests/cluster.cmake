# The cluster control plane with real weftd processes on loopback
# (tests/test_cluster.c): rendezvous of 3 nodes, version refusal, member
# lost and back, coordinator lost and back, member killed in rendezvous.
add_executable(test_cluster ${CMAKE_CURRENT_LIST_DIR}/test_cluster.c)
target_link_libraries(test_cluster PRIVATE weft Threads::Threads m)
target_compile_options(test_cluster PRIVATE -O2)
add_test(NAME e2e_cluster COMMAND test_cluster $<TARGET_FILE:weftd>)
set_tests_properties(e2e_cluster PROPERTIES TIMEOUT 120)

# Their control messages on their own (tests/unit/test_cluster_models_msg.c):
# mload .. mready and fjob through put / encode / decode / get, and what
# get refuses.
add_executable(test_cluster_models_msg ${CMAKE_CURRENT_LIST_DIR}/test_cluster_models_msg.c)
target_include_directories(test_cluster_models_msg PRIVATE ${WEFT_TESTS_DIR})
target_link_libraries(test_cluster_models_msg PRIVATE weft_proto PkgConfig::MSGPACK m)
add_test(NAME proto_cluster_models_msg COMMAND test_cluster_models_msg)

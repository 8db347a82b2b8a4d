# proto: the wire codec on its own (test_proto: requests, replies, limits;
# test_proto_models: the resident-model ops; test_cluster_msg: the control
# messages between daemons), the daemon against bad input over a real
# socket (e2e_badinput), and the libFuzzer target.
foreach(t test_proto test_proto_models test_cluster_msg)
  add_executable(${t} ${CMAKE_CURRENT_LIST_DIR}/${t}.c)
  target_include_directories(${t} PRIVATE ${WEFT_TESTS_DIR})
  target_link_libraries(${t} PRIVATE weft_proto PkgConfig::MSGPACK m)
endforeach()
add_test(NAME proto COMMAND test_proto)
add_test(NAME proto_models COMMAND test_proto_models)
add_test(NAME proto_cluster_msg COMMAND test_cluster_msg)


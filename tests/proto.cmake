# proto: the wire codec on its own (test_proto: requests, replies, limits;
# test_proto_models: the resident-model ops; test_cluster_msg: the control
# messages between daemons), the daemon against bad input over a real
# socket (e2e_badinput), and the libFuzzer target.
foreach(t test_proto test_proto_models test_cluster_msg)
  add_executable(${t} ${CMAKE_CURRENT_LIST_DIR}/${t}.c)
  target_include_directories(${t} PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(${t} PRIVATE weft_proto PkgConfig::MSGPACK m)
endforeach()
add_test(NAME proto COMMAND test_proto)
add_test(NAME proto_models COMMAND test_proto_models)
add_test(NAME proto_cluster_msg COMMAND test_cluster_msg)

add_executable(test_badinput ${CMAKE_CURRENT_LIST_DIR}/test_badinput.c)
target_include_directories(test_badinput PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(test_badinput PRIVATE weft_proto PkgConfig::ZMQ
  PkgConfig::MSGPACK m)
add_test(NAME e2e_badinput COMMAND test_badinput $<TARGET_FILE:weftd>)
set_tests_properties(e2e_badinput PROPERTIES TIMEOUT 120)

# libFuzzer: -DWEFT_FUZZ=ON with CC=clang. Run it by hand, e.g.
#   fuzz_proto -malloc_limit_mb=256 -rss_limit_mb=1024 -max_total_time=120 CORPUS
# (fuzz_cluster_msg the same way, for the messages between daemons)
if(WEFT_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "WEFT_FUZZ=ON needs clang (CC=clang)")
  endif()
  add_executable(fuzz_proto ${CMAKE_CURRENT_LIST_DIR}/fuzz/fuzz_proto.c)
  target_compile_options(fuzz_proto PRIVATE -fsanitize=fuzzer,address,undefined
                         -fno-sanitize-recover=undefined)
  target_link_options(fuzz_proto PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_proto PRIVATE weft_proto)
  add_executable(fuzz_cluster_msg ${CMAKE_CURRENT_LIST_DIR}/fuzz/fuzz_cluster_msg.c)
  target_compile_options(fuzz_cluster_msg PRIVATE -fsanitize=fuzzer,address,undefined
                         -fno-sanitize-recover=undefined)
  target_link_options(fuzz_cluster_msg PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_cluster_msg PRIVATE weft_proto)
  add_executable(fuzz_seeds ${CMAKE_CURRENT_LIST_DIR}/fuzz/fuzz_seeds.c)
  target_link_libraries(fuzz_seeds PRIVATE weft_proto)
  target_link_options(fuzz_seeds PRIVATE -fsanitize=address,undefined)
  # the codec itself must be instrumented for coverage-guided fuzzing
  target_compile_options(weft_proto PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
endif()

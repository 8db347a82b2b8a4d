# The daemon against proto/PROTOCOL.md: the hello's
# version and features, the op echo, the mesh rules of attention (tp | Hq,
# devices, the anything flags), forward's sequence rule and one reply per
# request at the end of a SIGTERM drain. Real weftd cpu:4 and cpu:2.
add_executable(test_conform ${CMAKE_CURRENT_LIST_DIR}/test_conform.c)
target_include_directories(test_conform PRIVATE ${WEFT_TESTS_DIR})
target_link_libraries(test_conform PRIVATE weft_testsupport weft weft_proto
  PkgConfig::ZMQ PkgConfig::MSGPACK m)
add_test(NAME e2e_conform COMMAND test_conform $<TARGET_FILE:weftd>
  ${WEFT_TESTS_DIR}/fixtures)
set_tests_properties(e2e_conform PROPERTIES TIMEOUT 180)

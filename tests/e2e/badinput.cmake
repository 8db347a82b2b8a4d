# The daemon against bad input over a real socket (test_badinput.c).
add_executable(test_badinput ${CMAKE_CURRENT_LIST_DIR}/test_badinput.c)
target_include_directories(test_badinput PRIVATE ${WEFT_TESTS_DIR})
target_link_libraries(test_badinput PRIVATE weft_spawn weft_proto PkgConfig::ZMQ
  PkgConfig::MSGPACK m)
add_test(NAME e2e_badinput COMMAND test_badinput $<TARGET_FILE:weftd>)
set_tests_properties(e2e_badinput PROPERTIES TIMEOUT 120)


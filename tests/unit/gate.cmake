# The client plane's gate on its own (daemon/net/gate.h): a raw CURVE
# client over ipc:// whose key is refused, counted once per connection
# whether or not the ERROR can be written.
add_executable(test_gate ${CMAKE_CURRENT_LIST_DIR}/test_gate.c)
target_link_libraries(test_gate PRIVATE weftd_core)
add_test(NAME gate COMMAND test_gate)

# The client plane's transport bounds (daemon/net/gate.h) against a raw
# ZMTP peer on plain TCP sockets (tests/e2e/test_zmtp.c): endless "more"
# frames, a hello with 100 frames of 4 MiB, idle connections and a slow
# greeting, CURVE heartbeats counted by a TCP relay; the daemon's RSS stays
# within the stated bound and a libweft client is served meanwhile.
add_executable(test_zmtp ${CMAKE_CURRENT_LIST_DIR}/test_zmtp.c)
target_link_libraries(test_zmtp PRIVATE weft_rawd weft_clusterd weft_proto weft
                      Threads::Threads m)
add_test(NAME e2e_zmtp COMMAND test_zmtp $<TARGET_FILE:weftd>)
set_tests_properties(e2e_zmtp PROPERTIES TIMEOUT 300)

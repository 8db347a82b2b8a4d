# The NCCL comm backend itself (daemon/comm/comm_nccl.c) without a GPU:
# compiled into the test with the stand-in CUDA runtime and NCCL of
# tests/support/nccl_lib_standin.c (streams as threads, NCCL calls as
# stream operations), whose definitions the executable's own symbols make
# the ones comm_nccl.c calls. Stream-ordered collectives against
# commcheck, the host waits per call, the abort watchdog
# (tests/unit/test_nccl_stream.c). Where NCCL's headers are found.
if(WEFT_HAVE_NCCL)
  add_executable(test_nccl_stream ${CMAKE_CURRENT_LIST_DIR}/test_nccl_stream.c
                 ${PROJECT_SOURCE_DIR}/daemon/comm/comm_nccl.c
                 ${WEFT_TESTS_DIR}/support/nccl_lib_standin.c)
  target_link_libraries(test_nccl_stream PRIVATE weft_commcheck weftd_core weft_nccl
                        Threads::Threads)
  add_test(NAME nccl_stream COMMAND test_nccl_stream)
  set_tests_properties(nccl_stream PROPERTIES TIMEOUT 180)
endif()

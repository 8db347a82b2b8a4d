# Support code shared by several tests, as libraries.

# Starting and ending a test's programs (support/spawn.c): fork + exec
# with environment, notify socket, log files, passed sockets and a user;
# bounded waits and stops. Every support library that starts a daemon
# links it: jobcheck (weft_testsupport), rawd, clusterd.
add_library(weft_spawn STATIC ${CMAKE_CURRENT_LIST_DIR}/spawn.c
            ${CMAKE_CURRENT_LIST_DIR}/ports.c)
target_include_directories(weft_spawn PUBLIC ${WEFT_TESTS_DIR})
target_link_libraries(weft_testsupport PUBLIC weft_spawn)

# Support for raw-ZeroMQ end-to-end tests: daemon start, notify, requests.
add_library(weft_rawd STATIC ${CMAKE_CURRENT_LIST_DIR}/rawd.c)
target_link_libraries(weft_rawd PUBLIC weft_spawn weft_proto PkgConfig::ZMQ Threads::Threads m)

# The NCCL stand-in (support/nccl_standin.c): NCCL's bootstrap over ZeroMQ.
add_library(weft_ncclsi STATIC ${CMAKE_CURRENT_LIST_DIR}/nccl_standin.c)
target_link_libraries(weft_ncclsi PUBLIC weftd_core)

# The op checkers and rank bodies both comm backend tests run
# (support/commcheck.c): test_comm (unit) and test_comm_zmq (cluster).
add_library(weft_commcheck STATIC ${CMAKE_CURRENT_LIST_DIR}/commcheck.c)
target_link_libraries(weft_commcheck PUBLIC weftd_core)

# A safetensors writer (support/st_writer.c).
add_library(weft_stwriter STATIC ${CMAKE_CURRENT_LIST_DIR}/st_writer.c)
target_link_libraries(weft_stwriter PUBLIC weft_modelfiles)

# FLUX and Wan inputs and outputs of the fixtures (support/fluxio.c).
add_library(weft_fluxio STATIC ${CMAKE_CURRENT_LIST_DIR}/fluxio.c)
target_link_libraries(weft_fluxio PUBLIC weft_testsupport weftd_core m)
target_compile_options(weft_fluxio PRIVATE -O2)

# weftd on the stand-in device backend (support/weftd_standin.c).
add_executable(weftd_standin ${CMAKE_CURRENT_LIST_DIR}/weftd_standin.c)
target_link_libraries(weftd_standin PRIVATE weftd_core weft_standin)

# Starting, waiting for, watching (sd_notify reader thread) and stopping
# weftd processes, shared by the cluster end-to-end tests
# (support/clusterd.c).
add_library(weft_clusterd STATIC ${CMAKE_CURRENT_LIST_DIR}/clusterd.c)
# weft_testsupport: the job that clusterd_kill_mid_job submits.
target_link_libraries(weft_clusterd PUBLIC weft_spawn weft weft_testsupport Threads::Threads)

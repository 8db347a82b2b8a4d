# libFuzzer: -DWEFT_FUZZ=ON with CC=clang. Run by hand, e.g.
#   fuzz_proto -malloc_limit_mb=256 -rss_limit_mb=1024 -max_total_time=300 CORPUS
# (fuzz_cluster_msg, fuzz_safetensors, fuzz_config and fuzz_gate the same way;
# tests/fuzz/README.md).
# Coverage guidance needs the code under test instrumented, not only the
# harness: every fuzzer links fuzz-only copies of the libraries it tests
# (weft_proto_fuzz: the wire codec and the control messages between
# daemons, cluster_msg.c / ctl.c; weft_modelfiles_fuzz: the safetensors
# parser, the families' config parsers and the other model-file readers),
# compiled with
# -fsanitize=fuzzer-no-link,address,undefined. The libraries weftd and
# libweft link stay as they are, so the rest of the tree builds and links
# in a fuzz build too.
if(WEFT_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "WEFT_FUZZ=ON needs clang (CC=clang)")
  endif()
  set(WEFT_FUZZ_CFLAGS -fsanitize=fuzzer-no-link,address,undefined
      -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  file(GLOB WEFT_PROTO_FUZZ_SRC CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/proto/*.c)
  add_library(weft_proto_fuzz STATIC ${WEFT_PROTO_FUZZ_SRC})
  target_include_directories(weft_proto_fuzz PUBLIC
    ${PROJECT_SOURCE_DIR}/proto ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(weft_proto_fuzz PRIVATE PkgConfig::MSGPACK PkgConfig::ZMQ)
  target_compile_options(weft_proto_fuzz PRIVATE ${WEFT_FUZZ_CFLAGS})
  file(GLOB WEFT_MODELFILES_FUZZ_SRC CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/modelfiles/*.c ${PROJECT_SOURCE_DIR}/modelfiles/*/*.c)
  add_library(weft_modelfiles_fuzz STATIC ${WEFT_MODELFILES_FUZZ_SRC})
  target_include_directories(weft_modelfiles_fuzz PUBLIC ${PROJECT_SOURCE_DIR}/modelfiles
    ${PROJECT_SOURCE_DIR}/modelfiles/flux)
  target_link_libraries(weft_modelfiles_fuzz PUBLIC weft_proto_fuzz weft_kernels
    PkgConfig::JANSSON m)
  target_compile_options(weft_modelfiles_fuzz PRIVATE ${WEFT_FUZZ_CFLAGS})
  foreach(f proto cluster_msg safetensors config)
    add_executable(fuzz_${f} ${CMAKE_CURRENT_LIST_DIR}/fuzz_${f}.c)
    target_compile_options(fuzz_${f} PRIVATE -fsanitize=fuzzer,address,undefined
                           -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
    target_link_options(fuzz_${f} PRIVATE -fsanitize=fuzzer,address,undefined)
  endforeach()
  target_link_libraries(fuzz_proto PRIVATE weft_proto_fuzz)
  target_link_libraries(fuzz_cluster_msg PRIVATE weft_proto_fuzz)
  target_link_libraries(fuzz_safetensors PRIVATE weft_modelfiles_fuzz)
  target_link_libraries(fuzz_config PRIVATE weft_modelfiles_fuzz)
  add_executable(fuzz_seeds ${CMAKE_CURRENT_LIST_DIR}/fuzz_seeds.c)
  target_link_libraries(fuzz_seeds PRIVATE weft_proto)
  # fuzz_gate: the client plane's ZMTP server (daemon/net/gate.c,
  # gate_curve.c) instrumented, with the log it writes to, over the
  # instrumented proto/ (keys.c, errf.c); driven through a real ipc://
  # socket by the harness (tests/fuzz/README.md).
  add_library(weft_gate_fuzz STATIC ${PROJECT_SOURCE_DIR}/daemon/net/gate.c
    ${PROJECT_SOURCE_DIR}/daemon/net/gate_curve.c
    ${PROJECT_SOURCE_DIR}/daemon/base/log.c)
  target_include_directories(weft_gate_fuzz PUBLIC ${PROJECT_SOURCE_DIR}/daemon
    ${PROJECT_SOURCE_DIR}/daemon/net)
  target_link_libraries(weft_gate_fuzz PUBLIC weft_proto_fuzz PkgConfig::ZMQ
    PkgConfig::SODIUM Threads::Threads)
  target_compile_options(weft_gate_fuzz PRIVATE ${WEFT_FUZZ_CFLAGS})
  add_executable(fuzz_gate ${CMAKE_CURRENT_LIST_DIR}/fuzz_gate.c)
  target_compile_options(fuzz_gate PRIVATE -fsanitize=fuzzer,address,undefined
                         -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  target_link_options(fuzz_gate PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_gate PRIVATE weft_gate_fuzz)
  add_executable(fuzz_gate_seeds ${CMAKE_CURRENT_LIST_DIR}/fuzz_gate_seeds.c)
  target_link_libraries(fuzz_gate_seeds PRIVATE weft_proto)
endif()

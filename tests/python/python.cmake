# The Python package (client/python) and its diffusers transformer, against
# real weftd daemons (tests/python). They run in the virtual environment
# that tests/python/make_venv.sh makes (.ci/deps runs it): without it they
# FAIL, unless WEFT_PY_TESTS=skip says to skip them (never under CI=true).
# HOME, else the user's home from passwd (as make_venv.sh does)
set(_weft_home "$ENV{HOME}")
if(_weft_home STREQUAL "")
  execute_process(COMMAND sh -c "getent passwd \"$(id -u)\" | cut -d: -f6"
                  OUTPUT_VARIABLE _weft_home OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
set(WEFT_PY_VENV "${_weft_home}/.cache/weft/venv-python" CACHE PATH
    "virtual environment of the Python tests (tests/python/make_venv.sh)")
set(_weft_py_env
  "WEFTD=$<TARGET_FILE:weftd>" "WEFTCTL=$<TARGET_FILE:weftctl>"
  "WEFT_LIB=$<TARGET_FILE:weft>" "WEFT_INCLUDE=${PROJECT_SOURCE_DIR}/include"
  "WEFT_SOURCE=${PROJECT_SOURCE_DIR}" "PYTHONPATH=${PROJECT_SOURCE_DIR}/client/python/src")
# python_binding: every libweft operation, error classes, ABI, the connect
# timeout, packaging (a wheel built offline from the tree, nothing written
# into it; a fresh venv installing it).
# python_pipeline: FluxPipeline with diffusers' transformer vs weftd's on
# tp=2, ulysses=2, ring=2 x tp=2 (weftd --devices cpu:4); batches that
# broadcast (true CFG, num_images_per_prompt), offload / LoRA / attention
# backend / dtype, from_pretrained, python -m weft, the pipeline example,
# a daemon restart (a second weftd --devices cpu:1).
# python_wan_pipeline: WanPipeline (Wan 2.1, and Wan 2.2's two experts)
# with diffusers' transformer vs weftd's on tp=1, ulysses=2, ring=2 and
# tp=2 once weftd serves it (weftd --devices cpu:2); num_videos_per_prompt
# with CFG, from_pretrained.
# python_gate_interop: weftd's client gate (gate.c, gate_curve.c) against
# a second ZeroMQ stack, pyzmq's bundled libzmq (NULL and CURVE; a key not
# listed, another server key, mechanism mismatches), and raw-socket ZMTP /
# CurveZMQ handshakes made byte for byte (libsodium through ctypes) with
# every command truncated, reordered, replayed and bit-flipped: each
# refused, nothing served, handshakes_refused counted, RSS bounded, and
# well-behaved clients served after (about 5 s; two daemons, cpu:1).
# python_cfg_overlap: the transformers' overlapped forwards: WanPipeline
# with CFG and FluxPipeline with true CFG against diffusers and against
# the synchronous forwards, both branches in flight at once on dp = 2
# (held jobs), errors raised where the result is used (weftd --devices
# cpu:2).
# A sanitized libweft.so loads into a Python that is not: the ASan
# runtime must come first (preloaded), and Python's own allocations are
# not ours to report as leaks.
if(WEFT_SANITIZE)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE _weft_asan OUTPUT_STRIP_TRAILING_WHITESPACE)
  list(APPEND _weft_py_env "LD_PRELOAD=${_weft_asan}"
       "ASAN_OPTIONS=detect_leaks=0:quarantine_size_mb=0")
endif()
foreach(t binding pipeline wan_pipeline gate_interop cfg_overlap cache)
  add_test(NAME python_${t}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run.sh ${WEFT_PY_VENV}
                   ${CMAKE_CURRENT_LIST_DIR}/test_${t}.py)
  set_tests_properties(python_${t} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600
                       ENVIRONMENT "${_weft_py_env}")
endforeach()

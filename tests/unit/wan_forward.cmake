# The Wan family (modelfiles/wan, daemon/models/wan) through the generic
# family path on the committed diffusers fixture (tests/fixtures/wan-tiny,
# from tests/parity/make_wan_fixtures.py): config, tensors, schema, plan
# and job checks, the forward on tp x ring x ulysses meshes with the host
# comm, on the CPU backend and the stand-in device (weft_standin).
add_executable(test_wan_forward ${CMAKE_CURRENT_LIST_DIR}/test_wan_forward.c)
target_link_libraries(test_wan_forward PRIVATE weftd_core weft_standin m)
add_test(NAME wan_forward COMMAND test_wan_forward ${WEFT_TESTS_DIR}/fixtures)
set_tests_properties(wan_forward PROPERTIES TIMEOUT 120)

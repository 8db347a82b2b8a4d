# The FLUX forward (daemon/models/flux/, models/linear.c) on real threads
# with the host comm: every tp x ring x ulysses mesh of the grid on the
# committed diffusers fixtures (tests/fixtures, from tests/parity/make_fixtures.py),
# on the CPU backend and on the stand-in device backend (weft_standin:
# resident shards, device workspace, comm_staged), non-default tp plans,
# the plan and job checks, and the comm calls a forward makes per mesh
# (support/comm_count.c).
add_executable(test_flux_forward ${CMAKE_CURRENT_LIST_DIR}/test_flux_forward.c
               ${WEFT_TESTS_DIR}/support/comm_count.c)
target_link_libraries(test_flux_forward PRIVATE weftd_core weft_standin m)
add_test(NAME flux_forward COMMAND test_flux_forward ${WEFT_TESTS_DIR}/fixtures)
set_tests_properties(flux_forward PROPERTIES TIMEOUT 300)

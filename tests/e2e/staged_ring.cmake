# The staged comm's overlapped transfers beyond its unit
# test (comm.cmake: test_comm_staged) and test_cp_attention's device ring:
#  - e2e_staged_ring (tests/e2e/test_staged_ring.sh): the mixed mode end to
#    end, weftd_standin's virtual devices on one ring, the world comm
#    staged with the stand-in's transfer stream, attention-demo jobs with
#    alltoall rotation on ring 4, 2 and 3 (PASS), and the daemon's
#    stand-in totals at exit (transfers overlapped with kernels, no access
#    to a range being copied);
#  - staged_ring_bench_standin: bench/bench_staged_ring on the stand-in
#    (the GPU benchmark's code path on a CPU, a few rounds): overlapped,
#    synchronous and allgather runs bit-identical on every rank.
add_test(NAME e2e_staged_ring
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_staged_ring.sh
                 $<TARGET_FILE:weftd_standin> $<TARGET_FILE:weftctl>)
set_tests_properties(e2e_staged_ring PROPERTIES TIMEOUT 180
                     ENVIRONMENT "WEFT_CPU_MEMORY=268435456")
add_test(NAME staged_ring_bench_standin
         COMMAND $<TARGET_FILE:bench_staged_ring> standin 3 192 4 32 1 2)
set_tests_properties(staged_ring_bench_standin PROPERTIES TIMEOUT 120)

# The cluster control plane with real weftd processes on loopback
# (test_cluster.c): rendezvous of 3 nodes, version refusal, member lost and
# back, coordinator lost and back, member killed in rendezvous.
add_executable(test_cluster ${CMAKE_CURRENT_LIST_DIR}/test_cluster.c)
target_link_libraries(test_cluster PRIVATE weft_clusterd weft Threads::Threads m)
target_compile_options(test_cluster PRIVATE -O2)
add_test(NAME e2e_cluster COMMAND test_cluster $<TARGET_FILE:weftd>)
set_tests_properties(e2e_cluster PROPERTIES TIMEOUT 120)

# The ZeroMQ comm backend across processes (daemon/comm/comm_zmq*.c): every op,
# ring exchanges, splits, abort, timeouts, bad traffic, with forked ranks
# on loopback (tests/cluster/test_comm_zmq.c).
add_executable(test_comm_zmq ${CMAKE_CURRENT_LIST_DIR}/test_comm_zmq.c)
target_link_libraries(test_comm_zmq PRIVATE weft_commcheck weftd_core)
add_test(NAME comm_zmq COMMAND test_comm_zmq)
set_tests_properties(comm_zmq PROPERTIES TIMEOUT 300)

# Jobs across daemons (tests/cluster/test_cluster_jobs.c): 3 weftd processes form
# one mesh of 6 ranks; ring / Ulysses / USP across processes against the
# fp64 reference, live re-mesh under load, a member killed with a job held
# on it (WEFT_TEST_HOLD_JOBS; WF_E_NODE_LOST within heartbeat_timeout_ms and
# a margin, service resumes), rejoin.
add_executable(test_cluster_jobs ${CMAKE_CURRENT_LIST_DIR}/test_cluster_jobs.c)
target_link_libraries(test_cluster_jobs PRIVATE weft_clusterd weft_testsupport weft Threads::Threads m)
target_compile_options(test_cluster_jobs PRIVATE -O2)
add_test(NAME e2e_cluster_jobs COMMAND test_cluster_jobs $<TARGET_FILE:weftd>)
set_tests_properties(e2e_cluster_jobs PROPERTIES TIMEOUT 180)

# A job failing on one rank (not a lost node) in a cluster
# (tests/cluster/test_cluster_fault.c): 3 weftd processes, ring=6 over all of them,
# the test hook WEFT_TEST_FAIL_JOB on a member and on the coordinator; the
# job's own error naming the node, the world rebuilt with the same nodes
# (new world epoch), queued and later jobs correct, the guard against
# rebuild loops (degraded, held for cluster_timeout_ms, then rebuilt).
add_executable(test_cluster_fault ${CMAKE_CURRENT_LIST_DIR}/test_cluster_fault.c)
target_link_libraries(test_cluster_fault PRIVATE weft_clusterd weft_testsupport weft Threads::Threads m)
target_compile_options(test_cluster_fault PRIVATE -O2)
add_test(NAME e2e_cluster_fault COMMAND test_cluster_fault $<TARGET_FILE:weftd>)
set_tests_properties(e2e_cluster_fault PROPERTIES TIMEOUT 120)

# dp replicas rooted on member nodes serve context-parallel jobs over the
# tensor channel (tests/cluster/test_cluster_replicas.c): 3 weftd processes, mesh
# dp=3 x ring=2 then dp=3 x ulysses=2, 24 jobs in flight from 2 clients
# against the fp64 reference, every device of every node served; a member
# killed with a job held on its replica (WEFT_TEST_HOLD_JOBS): WF_E_NODE_LOST
# within heartbeat_timeout_ms and a margin, the smaller world serves.
add_executable(test_cluster_replicas ${CMAKE_CURRENT_LIST_DIR}/test_cluster_replicas.c)
target_link_libraries(test_cluster_replicas PRIVATE weft_clusterd weft_testsupport weft Threads::Threads m)
target_compile_options(test_cluster_replicas PRIVATE -O2)
add_test(NAME e2e_cluster_replicas COMMAND test_cluster_replicas $<TARGET_FILE:weftd>)
set_tests_properties(e2e_cluster_replicas PROPERTIES TIMEOUT 120)

# dp replicas spanning nodes with their roots on a member
# (tests/cluster/test_cluster_split_roots.c): mesh dp=2 x ring=3 over 3 daemons,
# node b with a smaller max_tensor_bytes: a job over b's limit on b's
# replica fails in its root step naming b (WF_E_INTERNAL), the world is
# rebuilt with the same nodes, bursts before and after correct.
add_executable(test_cluster_split_roots ${CMAKE_CURRENT_LIST_DIR}/test_cluster_split_roots.c)
target_link_libraries(test_cluster_split_roots PRIVATE weft_clusterd weft_testsupport weft Threads::Threads m)
target_compile_options(test_cluster_split_roots PRIVATE -O2)
add_test(NAME e2e_cluster_split_roots COMMAND test_cluster_split_roots $<TARGET_FILE:weftd>)
set_tests_properties(e2e_cluster_split_roots PROPERTIES TIMEOUT 120)

# A node hello with control bytes in its name (tests/cluster/test_cluster_badname.c):
# refused by a real coordinator, nothing of it in sd_notify up to the line
# of a later, well-named peer's loss.
add_executable(test_cluster_badname ${CMAKE_CURRENT_LIST_DIR}/test_cluster_badname.c)
target_link_libraries(test_cluster_badname PRIVATE weft_clusterd weft_proto weft
  PkgConfig::ZMQ Threads::Threads)
add_test(NAME e2e_cluster_badname COMMAND test_cluster_badname $<TARGET_FILE:weftd>)
set_tests_properties(e2e_cluster_badname PROPERTIES TIMEOUT 120)

# The cluster plane attacked as a stranger would (tests/cluster/test_cluster_auth.c):
# node_keys worlds with stranger daemons, a hello under another
# node's key and takeover attempts on the tensor channel refused; the
# tensor channel without keys (no routing-id handover); a squatter on the
# rendezvous port; refused and dead hellos do not fill the node table, a
# hello's epoch of 2^64-1 moves nothing, protected mode without keys.
add_executable(test_cluster_auth ${CMAKE_CURRENT_LIST_DIR}/test_cluster_auth.c)
target_link_libraries(test_cluster_auth PRIVATE weft_clusterd weft_testsupport weft_proto
  weft PkgConfig::ZMQ Threads::Threads m)
target_compile_options(test_cluster_auth PRIVATE -O2)
foreach(s keys channel squatter table)
  add_test(NAME e2e_cluster_auth_${s} COMMAND test_cluster_auth $<TARGET_FILE:weftd> ${s})
  set_tests_properties(e2e_cluster_auth_${s} PROPERTIES TIMEOUT 90 LABELS "cluster;security")
endforeach()

# The data plane's bounds against a raw ZMTP peer (tests/cluster/test_data_bounds.c):
# whole max-size messages flooding the coordinator's tensor channel while
# jobs cross it, then a message of too many frames and a message that
# never ends (both cut by the gate); whole messages at a comm_zmq rank's
# port while its world is idle; a rank sending past
# comm_unexpected_bytes (WF_E_LIMIT); `multipart`: a message that never
# ends at an idle rank's port, cut. Peak RSS within
# (cluster_recv_messages + 2) x the largest message (+ U) + slack.
add_executable(test_data_bounds ${CMAKE_CURRENT_LIST_DIR}/test_data_bounds.c)
target_link_libraries(test_data_bounds PRIVATE weft_clusterd weft_testsupport weft_rawd
  weftd_core weft_proto weft PkgConfig::ZMQ Threads::Threads m)
target_compile_options(test_data_bounds PRIVATE -O2)
foreach(s channel comm multipart)
  add_test(NAME cluster_data_bounds_${s} COMMAND test_data_bounds $<TARGET_FILE:weftd> ${s})
  set_tests_properties(cluster_data_bounds_${s} PROPERTIES TIMEOUT 90 LABELS "cluster;security")
endforeach()

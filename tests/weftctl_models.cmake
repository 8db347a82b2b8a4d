# weftctl's model commands end to end (tests/test_weftctl_models.sh): a
# real weftd cpu:4 with a temporary model root of the fixtures; load,
# models, forward (PASS against diffusers), reconfigure re-shard, shard /
# load --sharded, --tp-plan, refusals, unload, clean SIGTERM.
add_test(NAME e2e_weftctl_models
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_weftctl_models.sh
                 $<TARGET_FILE:weftd> $<TARGET_FILE:weftctl>
                 ${CMAKE_CURRENT_LIST_DIR}/fixtures)
set_tests_properties(e2e_weftctl_models PROPERTIES TIMEOUT 240)

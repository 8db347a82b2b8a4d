# weftctl's model commands end to end (tests/e2e/test_weftctl_models.sh): a
# real weftd cpu:4 with a temporary model root of the fixtures; load,
# models, forward (PASS against diffusers), reconfigure re-shard, shard /
# load --sharded, --tp-plan, refusals, unload, clean SIGTERM.
add_test(NAME e2e_weftctl_models
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_weftctl_models.sh
                 $<TARGET_FILE:weftd> $<TARGET_FILE:weftctl>
                 ${WEFT_TESTS_DIR}/fixtures)
set_tests_properties(e2e_weftctl_models PROPERTIES TIMEOUT 240)

# The same script against weftd_standin: the daemon's device paths (the
# model's shards in device memory, forward workspaces from the device
# arena, the world comm staged through the copies, device-mode context
# parallelism) on the stand-in device backend, which scrambles its memory
# so that a path that skips a copy fails against diffusers' outputs.
add_test(NAME e2e_weftctl_models_standin
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_weftctl_models.sh
                 $<TARGET_FILE:weftd_standin> $<TARGET_FILE:weftctl>
                 ${WEFT_TESTS_DIR}/fixtures standin)
set_tests_properties(e2e_weftctl_models_standin PROPERTIES TIMEOUT 240
                     ENVIRONMENT "WEFT_CPU_MEMORY=402653184")

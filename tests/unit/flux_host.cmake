# Tensor-parallel plans (modelfiles/tp_plan.c) and the FLUX host copy with its
# sharded layout (modelfiles/model_host.c). test_flux_host reads the fixtures
# in tests/fixtures and writes sharded copies under a temporary model root.
add_executable(test_tp_plan ${CMAKE_CURRENT_LIST_DIR}/test_tp_plan.c)
target_link_libraries(test_tp_plan PRIVATE weft_modelfiles m)
add_test(NAME tp_plan COMMAND test_tp_plan)

# weft_stwriter (tests/unit/model.cmake) rewrites rank files for the damaged cases.
add_executable(test_flux_host ${CMAKE_CURRENT_LIST_DIR}/test_flux_host.c)
target_link_libraries(test_flux_host PRIVATE weft_stwriter weft_modelfiles m)
add_test(NAME flux_host COMMAND test_flux_host ${WEFT_TESTS_DIR}/fixtures)

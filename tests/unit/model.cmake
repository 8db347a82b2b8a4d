# Model files: safetensors (single and sharded), the model root's path
# rules, and the FLUX and Wan configs / expected tensors. Fixtures in
# tests/fixtures were written by diffusers and safetensors
# (tests/parity/make_fixtures.py and make_wan_fixtures.py, not run by CI).
foreach(t safetensors flux_config wan_config)
  add_executable(test_${t} ${CMAKE_CURRENT_LIST_DIR}/test_${t}.c)
  target_link_libraries(test_${t} PRIVATE weft_stwriter weft_modelfiles m)
  add_test(NAME ${t} COMMAND test_${t} ${WEFT_TESTS_DIR}/fixtures)
endforeach()

# fuzz_safetensors: tests/fuzz/fuzz.cmake (WEFT_FUZZ), with the other fuzzers.

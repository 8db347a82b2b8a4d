# kernels/fp8.h's e4m3 rounding against cuda_fp8.h's conversions, both on
# the CPU (nvcc host code): every e4m3 code, midpoints, ~1e6 floats. CUDA
# builds only; needs no GPU.
if(WEFT_HAVE_CUDA)
  add_executable(test_fp8_nv ${CMAKE_CURRENT_LIST_DIR}/test_fp8_nv.cu)
  target_include_directories(test_fp8_nv PRIVATE ${PROJECT_SOURCE_DIR}/kernels
    ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(test_fp8_nv PRIVATE m)
  target_compile_options(test_fp8_nv PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
  if(WEFT_WERROR)
    target_compile_options(test_fp8_nv PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Werror>)
  endif()
  add_test(NAME fp8_nv COMMAND test_fp8_nv)
endif()

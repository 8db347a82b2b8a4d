# The installed package: binaries, header, pkg-config file, unit.
add_test(NAME install COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_install.sh
         ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(install PROPERTIES TIMEOUT 120)
# A sanitized build installs sanitized libraries: the example must link the
# sanitizer runtimes too.
if(WEFT_SANITIZE)
  set_tests_properties(install PROPERTIES
    ENVIRONMENT "WEFT_TEST_CFLAGS=-fsanitize=address,undefined")
endif()

# The systemd unit and the example configuration.
add_test(NAME units COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_units.sh
         ${PROJECT_SOURCE_DIR} $<TARGET_FILE:weftd>)

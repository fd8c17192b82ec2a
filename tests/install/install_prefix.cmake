# Installs the tessera build in BUILD_DIR to the scratch prefix PREFIX (emptied first): the
# install the tests of label `install` use (ctest fixture tessera_install, tests/CMakeLists.txt).
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} --prefix ${PREFIX} failed (${rc})\n${out}\n${err}")
endif()
message(STATUS "tessera installed to ${PREFIX}")

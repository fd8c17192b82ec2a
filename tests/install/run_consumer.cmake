# Configures, builds and runs the consumer project in SOURCE_DIR (tests/install/consumer) in
# WORK_DIR, against one of tessera's two CMake packages:
#   -DPREFIX=<dir>        an install (found through CMAKE_PREFIX_PATH=<dir>; test install_consumer),
#                         with -DLIBDIR=<its libdir, relative> (the package is in <dir>/<libdir>/cmake/tessera)
#   -DPACKAGE_DIR=<dir>   a build folder, not installed (tessera_DIR=<dir>; test build_tree_consumer)
# -DEXPECT_CUDA=0|1 goes to the consumer as TESSERA_CONSUMER_EXPECT_CUDA (the program fails
# unless it sees TESSERA_WITH_CUDA exactly then); -DCXX_COMPILER and -DGENERATOR: the tessera
# build's. Checks that find_package took the package asked for. Fails on any step's failure.
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${build})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
if(DEFINED PREFIX)
  set(find_args -DCMAKE_PREFIX_PATH=${PREFIX})
  set(expected_dir ${PREFIX}/${LIBDIR}/cmake/tessera)
elseif(DEFINED PACKAGE_DIR)
  set(find_args -Dtessera_DIR=${PACKAGE_DIR})
  set(expected_dir ${PACKAGE_DIR})
else()
  message(FATAL_ERROR "run_consumer.cmake: give -DPREFIX=<install prefix> or -DPACKAGE_DIR=<build folder>")
endif()
set(generator_args "")
if(GENERATOR)
  set(generator_args -G ${GENERATOR})
endif()
step(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${build} ${generator_args} ${find_args} -DCMAKE_BUILD_TYPE=Release
     -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DTESSERA_CONSUMER_EXPECT_CUDA=${EXPECT_CUDA})
# The package find_package took (an install elsewhere on the machine must not stand in for it).
file(STRINGS ${build}/CMakeCache.txt tessera_dir_line REGEX "^tessera_DIR:")
string(REGEX REPLACE "^tessera_DIR:[A-Z]+=" "" tessera_dir "${tessera_dir_line}")
file(REAL_PATH "${tessera_dir}" tessera_dir)
file(REAL_PATH "${expected_dir}" expected_dir)
if(NOT tessera_dir STREQUAL expected_dir)
  message(FATAL_ERROR "find_package(tessera) took '${tessera_dir}', not the package under test (${expected_dir})")
endif()
step(${CMAKE_COMMAND} --build ${build})
step(${build}/consumer)
if(EXISTS ${build}/consumer_mpi)  # the package's tessera::tessera_mpi
  step(${build}/consumer_mpi)
endif()

# Builds tests/consumer against inferkit the ways a C++ user does, then runs it:
#   find_package     installed to a temporary prefix, found with find_package(inferkit)
#   add_subdirectory the source tree added as a subdirectory
#   fetch_content    the source tree pulled in with FetchContent (as from a release archive)
#   pkg_config       installed to a temporary prefix, a plain Makefile with pkg-config flags
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

set(consumer "${WORK_DIR}/build/consumer")
if(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
  run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/consumer" -B "${WORK_DIR}/build" -G "${GENERATOR}"
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCONSUMER_MODE=find_package)
  run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
elseif(MODE STREQUAL "pkg_config")
  run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
  file(MAKE_DIRECTORY "${WORK_DIR}/build")
  run(${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${WORK_DIR}/prefix/share/pkgconfig"
      make -C "${SOURCE_DIR}/tests/consumer" -B "OUT=${WORK_DIR}/build")
elseif(MODE STREQUAL "fetch_content")
  # What a release archive holds for a consumer: the build files, the headers and the license.
  execute_process(COMMAND ${CMAKE_COMMAND} -E tar czf "${WORK_DIR}/inferkit-src.tar.gz"
                          CMakeLists.txt cmake include LICENSE
                  WORKING_DIRECTORY "${SOURCE_DIR}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "could not pack the source tree (${rc})")
  endif()
  run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/consumer" -B "${WORK_DIR}/build" -G "${GENERATOR}"
      -DCMAKE_BUILD_TYPE=Release -DCONSUMER_MODE=fetch_content -DINFERKIT_ARCHIVE=${WORK_DIR}/inferkit-src.tar.gz)
  run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
else()
  run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/consumer" -B "${WORK_DIR}/build" -G "${GENERATOR}"
      -DCMAKE_BUILD_TYPE=Release -DCONSUMER_MODE=add_subdirectory -DINFERKIT_SOURCE_DIR=${SOURCE_DIR})
  run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
endif()
run("${consumer}")

# Installs nbits from BUILD_DIR into a scratch prefix, then configures, builds
# and runs the consumer project against that prefix only.
set(work "${BUILD_DIR}/consumer-test")
file(REMOVE_RECURSE "${work}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${work}/prefix"
                RESULT_VARIABLE result)
if(result)
  message(FATAL_ERROR "cmake --install failed")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${work}/build" -G "${GENERATOR}"
                        "-DCMAKE_PREFIX_PATH=${work}/prefix"
                RESULT_VARIABLE result)
if(result)
  message(FATAL_ERROR "configuring the consumer against the installed package failed")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${work}/build" RESULT_VARIABLE result)
if(result)
  message(FATAL_ERROR "building the consumer failed")
endif()
execute_process(COMMAND "${work}/build/consumer" RESULT_VARIABLE result)
if(result)
  message(FATAL_ERROR "the consumer failed (exit ${result})")
endif()

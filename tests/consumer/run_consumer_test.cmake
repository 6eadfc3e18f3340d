# ctest consumer.find_package: installs the build tree BUILD into WORK/prefix, then configures,
# builds and runs the consumer project (tests/consumer) against it.
#   cmake -DBUILD=... -DSRC=... -DWORK=... -DCONFIG=... -P run_consumer_test.cmake
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok\n${out}")
  set(out "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix --config ${CONFIG})
run("configure consumer" ${CMAKE_COMMAND} -S ${SRC}/tests/consumer -B ${WORK}/build
    -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_BUILD_TYPE=Release)
run("build consumer" ${CMAKE_COMMAND} --build ${WORK}/build)
run("run consumer_core" ${WORK}/build/consumer_core)
if(EXISTS ${WORK}/build/consumer_gpu)
  run("run consumer_gpu" ${WORK}/build/consumer_gpu)
endif()
if(NOT EXISTS ${WORK}/prefix/bin/iser)
  message(FATAL_ERROR "cmake --install did not install the iser CLI")
endif()
# The installed CLI replays the installed copy of the bundled data (not the source tree's).
run("installed iser replay" ${WORK}/prefix/bin/iser replay -q --paper-e1 --ep 8
    --tokens-per-rank 256 --iterations 1 --policies none,iser --layers 3,7)
string(FIND "${out}" "${WORK}/prefix/share/iser/data/" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "installed iser replay did not use ${WORK}/prefix/share/iser/data:\n${out}")
endif()

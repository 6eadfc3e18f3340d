# Runs one CLI case (see cli_cases.cmake): cmake -DISER=... -DSRC=... -DWITH_CUDA=...
#   -DCLI_FILE=<cases file> -DCLI_CASE=<name> -P run_cli_case.cmake
set(CLI_MODE run)
set(CLI_CASE_FOUND FALSE)
include(${CMAKE_CURRENT_LIST_DIR}/cli_cases.cmake)
include(${CLI_FILE})
if(NOT CLI_CASE_FOUND)
  message(FATAL_ERROR "tests/cli: no case '${CLI_CASE}' in ${CLI_FILE}")
endif()

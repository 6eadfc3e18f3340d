# CLI tests: every `expect(...)` in tests/cli/cases_*.cmake is one ctest test, `cli.<name>`.
#
# The case files are read twice. At configure time (CLI_MODE = register, included from
# tests/CMakeLists.txt) `expect` registers a test per case. At test time each test runs
# `cmake -P run_cli_case.cmake` with CLI_FILE and CLI_CASE; the case file is read again and
# `expect` runs only the named case. Each test has its own working directory, so cases never
# share output files unless one names another with `cli_requires(<case>)` (it then runs in that
# case's directory, after it). Checks that follow a case and read its outputs are guarded by
# `if(CLI_LAST_RAN)`: true right after an `expect` that ran its command, false everywhere else
# (and always at configure time).
#
# expect(<name> <exit code | nonzero> <substring of stdout+stderr> <iser arguments>...)

set(CLI_LAST_RAN FALSE)
set(CLI_NEXT_REQUIRES "")

macro(cli_requires case_name)
  set(CLI_NEXT_REQUIRES "${case_name}")
endmacro()

function(expect name expected_rc expected_text)
  set(CLI_LAST_RAN FALSE PARENT_SCOPE)
  set(CLI_NEXT_REQUIRES "" PARENT_SCOPE)
  if(CLI_MODE STREQUAL "register")
    if(TEST cli.${name})
      message(FATAL_ERROR "tests/cli: two cases are named '${name}' (${CLI_FILE})")
    endif()
    set(work_dir "${CLI_WORK_ROOT}/${name}")
    if(CLI_NEXT_REQUIRES)
      set(work_dir "${CLI_WORK_ROOT}/${CLI_NEXT_REQUIRES}")
    endif()
    file(MAKE_DIRECTORY "${work_dir}")
    add_test(NAME cli.${name}
             COMMAND ${CMAKE_COMMAND} -DISER=${CLI_ISER} -DSRC=${SRC} -DWITH_CUDA=${WITH_CUDA}
                     -DCLI_FILE=${CLI_FILE} -DCLI_CASE=${name}
                     -P ${CMAKE_CURRENT_LIST_DIR}/run_cli_case.cmake
             WORKING_DIRECTORY "${work_dir}")
    set_tests_properties(cli.${name} PROPERTIES LABELS "cpu;cli" FIXTURES_SETUP cli.${name})
    if(CLI_NEXT_REQUIRES)
      set_tests_properties(cli.${name} PROPERTIES FIXTURES_REQUIRED cli.${CLI_NEXT_REQUIRES})
    endif()
    return()
  endif()
  if(NOT name STREQUAL CLI_CASE)
    return()
  endif()
  set(CLI_CASE_FOUND TRUE PARENT_SCOPE)
  execute_process(COMMAND ${ISER} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 120)
  set(all "${out}${err}")
  if(expected_rc STREQUAL "nonzero")
    if(rc EQUAL 0)
      message(SEND_ERROR "${name}: expected a non-zero exit, got 0\n${all}")
    endif()
  elseif(NOT rc EQUAL expected_rc)
    message(SEND_ERROR "${name}: expected exit ${expected_rc}, got ${rc}\n${all}")
  endif()
  string(FIND "${all}" "${expected_text}" pos)
  if(pos EQUAL -1)
    message(SEND_ERROR "${name}: output lacks '${expected_text}'\n${all}")
  endif()
  set(CLI_LAST_RAN TRUE PARENT_SCOPE)
endfunction()

# After a case that wrote <file>: fail that case unless the file contains <text>.
function(expect_file_contains case_name file text)
  if(NOT CLI_LAST_RAN)
    return()
  endif()
  if(NOT EXISTS "${file}")
    message(SEND_ERROR "${case_name}: ${file} was not written")
    return()
  endif()
  file(READ "${file}" content)
  string(FIND "${content}" "${text}" pos)
  if(pos EQUAL -1)
    message(SEND_ERROR "${case_name}: ${file} lacks '${text}'")
  endif()
endfunction()

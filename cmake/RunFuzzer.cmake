# Runs one libFuzzer harness for ctest (cmake -P). Two modes:
#
#   MODE=fuzz    copies CORPUS into WORK/corpus (so the repository's seed corpus
#                is never modified) and fuzzes for SECONDS with the limits the
#                test suite uses; libFuzzer prints its seed (INFO: Seed: N), so a
#                failing run can be repeated with -seed=N. Crash, leak, timeout and
#                OOM inputs land in WORK/ as crash-*, leak-*, timeout-*, oom-*.
#   MODE=replay  runs the harness once on every file in CORPUS (a regressions
#                folder): each is a past finding that must stay fixed. An absent
#                or empty folder passes.
#
# Variables: FUZZER (executable), CORPUS (folder), WORK (scratch folder),
# SECONDS (MODE=fuzz), MODE, and optionally DICT (a libFuzzer dictionary).
cmake_minimum_required(VERSION 3.25)

foreach(var FUZZER CORPUS WORK MODE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "RunFuzzer.cmake: ${var} is not set")
  endif()
endforeach()

# Both sanitizers stop at the first error so libFuzzer records the input.
set(ENV{ASAN_OPTIONS} "detect_leaks=1:abort_on_error=1:symbolize=1")
set(ENV{UBSAN_OPTIONS} "print_stacktrace=1:halt_on_error=1")

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

if(MODE STREQUAL "fuzz")
  if(NOT DEFINED SECONDS)
    message(FATAL_ERROR "RunFuzzer.cmake: SECONDS is not set")
  endif()
  file(MAKE_DIRECTORY "${WORK}/corpus")
  file(GLOB seeds "${CORPUS}/*")
  if(NOT seeds)
    message(FATAL_ERROR "RunFuzzer.cmake: no seed corpus in ${CORPUS} (regenerate it: see fuzz/README.md)")
  endif()
  file(COPY ${seeds} DESTINATION "${WORK}/corpus")
  list(LENGTH seeds n)
  message(STATUS "fuzzing ${FUZZER} for ${SECONDS} s from ${n} seeds (copy in ${WORK}/corpus)")
  set(dict_arg "")
  if(DEFINED DICT)
    set(dict_arg "-dict=${DICT}")
  endif()
  execute_process(
    COMMAND "${FUZZER}" -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048
            -print_final_stats=1 -artifact_prefix=${WORK}/ ${dict_arg} "${WORK}/corpus"
    WORKING_DIRECTORY "${WORK}"
    RESULT_VARIABLE rc)
elseif(MODE STREQUAL "replay")
  file(GLOB inputs "${CORPUS}/*")
  list(FILTER inputs EXCLUDE REGEX "/README[^/]*$")
  if(NOT inputs)
    message(STATUS "no regression inputs in ${CORPUS}")
    return()
  endif()
  list(LENGTH inputs n)
  message(STATUS "replaying ${n} regression inputs from ${CORPUS}")
  # Given files (not folders), libFuzzer runs each once and writes nothing.
  execute_process(
    COMMAND "${FUZZER}" -timeout=10 -rss_limit_mb=2048 ${inputs}
    WORKING_DIRECTORY "${WORK}"
    RESULT_VARIABLE rc)
else()
  message(FATAL_ERROR "RunFuzzer.cmake: unknown MODE ${MODE}")
endif()

if(NOT rc EQUAL 0)
  if(MODE STREQUAL "replay")
    message(FATAL_ERROR "${FUZZER} failed (exit ${rc}) on a regression input in ${CORPUS} "
                        "(the last \"Running:\" line above names it)")
  endif()
  file(GLOB artifacts "${WORK}/crash-*" "${WORK}/leak-*" "${WORK}/timeout-*" "${WORK}/oom-*"
       "${WORK}/slow-unit-*")
  message(FATAL_ERROR "${FUZZER} failed (exit ${rc}); failing input(s): ${artifacts}\n"
                      "Reproduce with: ${FUZZER} <input>; once fixed, keep the input in "
                      "fuzz/regressions/<harness>/ and add a unit test for it.")
endif()

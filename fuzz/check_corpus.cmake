# ctest fuzz.corpus_up_to_date (cmake -P): runs the corpus generator into WORK
# and fails unless fuzz/corpus holds exactly the same files with the same bytes,
# so the committed seeds always match the generator in the repository.
# Variables: GENERATOR (make_corpus), CORPUS (fuzz/corpus), WORK (scratch).
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK}")
execute_process(COMMAND "${GENERATOR}" "${WORK}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${GENERATOR} failed (exit ${rc})")
endif()
file(GLOB_RECURSE generated RELATIVE "${WORK}" "${WORK}/*")
file(GLOB_RECURSE committed RELATIVE "${CORPUS}" "${CORPUS}/*")
list(SORT generated)
list(SORT committed)
if(NOT generated STREQUAL committed)
  message(FATAL_ERROR "fuzz/corpus is stale: the generator writes\n  ${generated}\n"
                      "but the repository has\n  ${committed}\n"
                      "Run: cmake --build --preset fuzz --target fuzz_corpus")
endif()
foreach(f ${generated})
  file(SHA256 "${WORK}/${f}" a)
  file(SHA256 "${CORPUS}/${f}" b)
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "fuzz/corpus/${f} differs from the generator's output. "
                        "Run: cmake --build --preset fuzz --target fuzz_corpus")
  endif()
endforeach()
list(LENGTH generated n)
message(STATUS "fuzz/corpus matches the generator (${n} files)")

# s3oram_target_warnings(<target>): the warning set for project code. Third-party
# headers are included as SYSTEM so only our code is held to -Werror.
function(s3oram_target_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align
    -Woverloaded-virtual -Wformat=2 -Wimplicit-fallthrough)
  if(S3ORAM_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC's -Wmaybe-uninitialized misfires on libstdc++ internals (std::function
    # inside std::regex) once ASan instrumentation is inlined at -O2.
    target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
  endif()
  if(S3ORAM_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

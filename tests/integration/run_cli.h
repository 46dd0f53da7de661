// Runs the built `s3oram` binary (or $S3ORAM_CLI) with a shell argument
// string, stdin from /dev/null, and returns its exit code and combined
// output. For integration tests that drive the CLI as a user would.
#pragma once

#include <stdio.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace s3oram::testing {

struct CliRun {
  int exit_code = -1;  // -1: did not exit normally (or could not start)
  std::string output;
};

inline CliRun RunCli(const std::string& args) {
  const char* cli = std::getenv("S3ORAM_CLI");
  const std::string cmd =
      std::string(cli ? cli : S3ORAM_TEST_CLI) + " " + args + " 2>&1 </dev/null";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace s3oram::testing

// s3oram: create, inspect and benchmark s3oramfs filesystems (man 1 s3oram).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"s3oram: manage s3oramfs filesystems and their S3ORAM servers"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "s3oram 0.1.0");
  int exit_code = 0;
  s3oram::cli::RegisterInit(app, &exit_code);
  s3oram::cli::RegisterPasswd(app, &exit_code);
  s3oram::cli::RegisterKeygen(app, &exit_code);
  s3oram::cli::RegisterParams(app, &exit_code);
  s3oram::cli::RegisterStatus(app, &exit_code);
  s3oram::cli::RegisterBench(app, &exit_code);
  s3oram::cli::RegisterCluster(app, &exit_code);
  s3oram::cli::RegisterBackupState(app, &exit_code);
  s3oram::cli::RegisterRestore(app, &exit_code);
  spdlog::set_pattern("s3oram: %l: %v");
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}

// s3oram: create, inspect and benchmark s3oramfs filesystems (man 1 s3oram).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string_view>

#include "cli/commands.h"
#include "oramcore/base/no_core_dumps.h"

int main(int argc, char** argv) {
  // Before anything else: most commands read a passphrase, unwrap the master
  // key or decrypt the state (fsck, rebuild, restore, attach, passwd), and a
  // core file or a debugger of the same user would see them all.
  if (auto st = s3oram::ForbidCoreDumps(); !st.ok()) {
    std::fprintf(stderr, "s3oram: %s\n", st.ToString().c_str());
    return 1;
  }
  CLI::App app{"s3oram: manage s3oramfs filesystems and their S3ORAM servers"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "s3oram 0.1.0");
  int exit_code = 0;
  s3oram::cli::RegisterInit(app, &exit_code);
  s3oram::cli::RegisterPasswd(app, &exit_code);
  s3oram::cli::RegisterRekey(app, &exit_code);
  s3oram::cli::RegisterUpgradeState(app, &exit_code);
  s3oram::cli::RegisterKeygen(app, &exit_code);
  s3oram::cli::RegisterParams(app, &exit_code);
  s3oram::cli::RegisterStatus(app, &exit_code);
  s3oram::cli::RegisterBench(app, &exit_code);
  s3oram::cli::RegisterAgeFill(app, &exit_code);
  s3oram::cli::RegisterCluster(app, &exit_code);
  s3oram::cli::RegisterFsck(app, &exit_code);
  s3oram::cli::RegisterRebuild(app, &exit_code);
  s3oram::cli::RegisterScrub(app, &exit_code);
  s3oram::cli::RegisterBackupState(app, &exit_code);
  s3oram::cli::RegisterRestore(app, &exit_code);
  s3oram::cli::RegisterAttach(app, &exit_code);
  s3oram::cli::RegisterRefreshState(app, &exit_code);
  // Log lines go to stderr: stdout carries results (`--json`, status tables)
  // that scripts parse.
  spdlog::set_default_logger(spdlog::stderr_color_mt("s3oram"));
  spdlog::set_pattern("s3oram: %l: %v");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    // fsck's callers (scripts, boot) expect fsck(8)'s codes.
    if (code != 0 && argc > 1 && std::string_view(argv[1]) == "fsck") {
      return s3oram::cli::kFsckUsageError;
    }
    return code;
  }
  return exit_code;
}

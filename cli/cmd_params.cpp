// s3oram params: the safe bucket size for (A, H, lambda) and the cost model.
#include <cstdio>

#include "cli/commands.h"
#include "cli/param_options.h"

namespace s3oram::cli {

void RegisterParams(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("params", "smallest safe bucket size Z and per-access costs");
  auto opts = std::make_shared<ParamOptions>();
  auto json = std::make_shared<bool>(false);
  AddParamOptions(cmd, *opts);
  cmd->add_flag("--json", *json, "print JSON");
  cmd->callback([opts, json, exit_code] {
    auto p = ResolveParams(*opts, std::uint64_t{1} << 30);
    if (!p.ok()) {
      std::fprintf(stderr, "s3oram params: %s\n", p.status().ToString().c_str());
      *exit_code = 2;
      return;
    }
    if (*json) {
      std::printf("%s\n", ParamsJson(*p).c_str());
    } else {
      std::printf("S3ORAM parameters (lambda = %u):\n%s", p->lambda,
                  DescribeParams(*p, opts->allow_unsafe).c_str());
    }
  });
}

}  // namespace s3oram::cli

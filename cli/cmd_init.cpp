// s3oram init: create a filesystem's client state and initialise its servers.
#include <cstdio>

#include "cli/commands.h"
#include "cli/key_options.h"
#include "cli/param_options.h"
#include "oramcore/client.h"

namespace s3oram::cli {

void RegisterInit(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("init", "create a filesystem: client state file + empty server shares");
  struct Args {
    std::string state;
    std::vector<std::string> servers;
    ParamOptions params;
    bool overwrite = false;
    std::string passfile;
    KdfOptions kdf;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-s,--state", a->state, "client state file to create (SQLite)")->required();
  cmd->add_option("--server", a->servers, "server endpoint, once per server in index order "
                                          "(e.g. tcp://127.0.0.1:7300)")
      ->required();
  AddParamOptions(cmd, a->params);
  cmd->add_flag("--overwrite-servers", a->overwrite,
                "replace a filesystem the servers already hold (its data is lost)");
  AddPassfileOption(cmd, a->passfile, "--passfile", kPassphraseEnv,
                    "the new filesystem's passphrase");
  AddKdfOptions(cmd, a->kdf);
  cmd->callback([a, exit_code] {
    auto p = ResolveParams(a->params, std::uint64_t{1} << 30);
    if (!p.ok()) {
      std::fprintf(stderr, "s3oram init: %s\n", p.status().ToString().c_str());
      *exit_code = 2;
      return;
    }
    auto kdf = ResolveKdf(a->kdf);
    if (!kdf.ok()) {
      std::fprintf(stderr, "s3oram init: %s\n", kdf.status().ToString().c_str());
      *exit_code = 2;
      return;
    }
    auto pass = ReadPassphrase(PassphraseSource{a->passfile},
                               "New passphrase for " + a->state + ": ", /*confirm=*/true);
    if (!pass.ok()) {
      std::fprintf(stderr, "s3oram init: %s\n", pass.status().ToString().c_str());
      *exit_code = 2;
      return;
    }
    FsConfig config;
    config.params = *p;
    config.servers = a->servers;
    config.allow_unsafe = a->params.allow_unsafe;
    if (auto st = OramClient::Initialize(a->state, config, *pass, *kdf, a->overwrite); !st.ok()) {
      std::fprintf(stderr, "s3oram init: %s\n", st.ToString().c_str());
      *exit_code = 1;
      return;
    }
    std::printf("created %s on %zu servers\n%s", a->state.c_str(), a->servers.size(),
                DescribeParams(*p, a->params.allow_unsafe).c_str());
  });
}

}  // namespace s3oram::cli

// s3oram init: create a filesystem's client state and initialise its servers.
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/key_options.h"
#include "cli/param_options.h"
#include "oramcore/crypto/curve_keys.h"
#include "oramcore/protocol/client.h"

namespace s3oram::cli {

void RegisterInit(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("init", "create a filesystem: client state file + empty server shares");
  struct Args {
    std::string state;
    std::vector<std::string> servers;
    std::vector<std::string> server_keys;
    std::string client_key;
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
  cmd->add_option("--server-key", a->server_keys,
                  "CURVE public key of each server, in the same order as --server: 40 Z85 "
                  "characters or a .pub file")
      ->required();
  cmd->add_option("--client-key", a->client_key,
                  "this client's CURVE secret key file (s3oram keygen; mode 0600); the servers "
                  "must list its public key in authorized_clients")
      ->required();
  a->params.block_bytes = kDefaultFsBlockBytes;
  a->params.evict_rate = kDefaultFsEvictRate;
  AddParamOptions(cmd, a->params);
  cmd->add_flag("--overwrite-servers", a->overwrite,
                "replace a filesystem the servers already hold (its data is lost)");
  AddPassfileOption(cmd, a->passfile, "--passfile", kPassphraseEnv,
                    "the new filesystem's passphrase");
  AddKdfOptions(cmd, a->kdf);
  cmd->callback([a, exit_code] {
    a->params.servers = static_cast<std::uint32_t>(a->servers.size());  // ℓ, and with it t
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
    if (a->server_keys.size() != a->servers.size()) {
      std::fprintf(stderr, "s3oram init: give one --server-key per --server (%zu servers, %zu keys)\n",
                   a->servers.size(), a->server_keys.size());
      *exit_code = 2;
      return;
    }
    for (std::size_t i = 0; i < a->server_keys.size(); ++i) {
      auto key = ResolvePublicKey(a->server_keys[i], "--server-key " + std::to_string(i));
      if (!key.ok()) {
        std::fprintf(stderr, "s3oram init: %s\n", key.status().ToString().c_str());
        *exit_code = 2;
        return;
      }
      config.server_keys.push_back(*key);
    }
    // Absolute: the FUSE daemon runs from /.
    config.client_key_file = std::filesystem::absolute(a->client_key).string();
    if (auto k = LoadCurveKeypair(config.client_key_file); !k.ok()) {
      std::fprintf(stderr, "s3oram init: --client-key: %s\n", k.status().ToString().c_str());
      *exit_code = 2;
      return;
    }
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

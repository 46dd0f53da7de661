// s3oram upgrade-state: encrypts a client state of an earlier version in
// place (oramcore/state/state_upgrade.h).
#include <cstdio>

#include "cli/commands.h"
#include "cli/key_options.h"
#include "oramcore/crypto/passphrase.h"
#include "oramcore/state/state_header.h"
#include "oramcore/state/state_upgrade.h"

namespace s3oram::cli {

void RegisterUpgradeState(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "upgrade-state",
      "encrypt a client state of an earlier version, or convert one of an earlier sealed format, "
      "in place");
  struct Args {
    std::string state;
    std::string passfile;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-s,--state", a->state, "client state file")->required();
  AddPassfileOption(cmd, a->passfile);
  cmd->callback([a, exit_code] {
    auto pass = ReadPassphrase(PassphraseSource{a->passfile}, "Passphrase for " + a->state + ": ");
    if (!pass.ok()) {
      std::fprintf(stderr, "s3oram upgrade-state: %s\n", pass.status().ToString().c_str());
      *exit_code = 2;
      return;
    }
    auto r = UpgradeState(a->state, *pass);
    if (!r.ok()) {
      std::fprintf(stderr, "s3oram upgrade-state: %s\n", r.status().ToString().c_str());
      *exit_code = 1;
      return;
    }
    if (r->from_format != 0) {
      std::printf("%s converted from state format %u to %u (%llu pages sealed under a key of "
                  "its own; every log frame header authenticated)\n",
                  a->state.c_str(), r->from_format, kStateFormat,
                  static_cast<unsigned long long>(r->pages));
      return;
    }
    std::printf("%s is now encrypted (%llu pages sealed under a subkey of its master key)\n",
                a->state.c_str(), static_cast<unsigned long long>(r->pages));
  });
}

}  // namespace s3oram::cli

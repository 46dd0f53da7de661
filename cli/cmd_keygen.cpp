// s3oram keygen: make a CURVE keypair for a client or a server: PREFIX.key
// (secret, mode 0600) and PREFIX.pub (public, for the other side's config).
#include <cstdio>

#include "cli/commands.h"
#include "oramcore/crypto/curve_keys.h"

namespace s3oram::cli {

void RegisterKeygen(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "keygen", "make a CURVE keypair: PREFIX.key (secret, 0600) and PREFIX.pub (public)");
  auto prefix = std::make_shared<std::string>();
  cmd->add_option("-o,--out", *prefix, "path prefix of the two files")->required();
  cmd->callback([prefix, exit_code] {
    auto k = GenerateCurveKeypair();
    Status st = k.ok() ? WriteCurveKeypair(*k, *prefix) : k.status();
    if (!st.ok()) {
      std::fprintf(stderr, "s3oram keygen: %s\n", st.ToString().c_str());
      *exit_code = 1;
      return;
    }
    std::printf("wrote %s.key (secret) and %s.pub\npublic key: %s\n", prefix->c_str(),
                prefix->c_str(), k->public_key.c_str());
  });
}

}  // namespace s3oram::cli

// Command-line options for passphrases and the Argon2id cost (init, passwd),
// shared so every command takes them the same way.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "oramcore/base/status.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/crypto/passphrase.h"

namespace s3oram::cli {

struct KdfOptions {
  std::uint64_t ops = 0;  // 0: libsodium's MODERATE default
  std::string mem;        // e.g. "256M"; empty: default
  bool insecure = false;  // --insecure-kdf: allow costs below CheckKdfFloor
};

// --passfile FILE (help names $S3ORAM_PASSPHRASE and the terminal prompt).
void AddPassfileOption(CLI::App* cmd, std::string& passfile, const std::string& flag = "--passfile",
                       const std::string& env = kPassphraseEnv, const std::string& what = "the passphrase");
// --kdf-ops N, --kdf-mem SIZE, --insecure-kdf.
void AddKdfOptions(CLI::App* cmd, KdfOptions& o);
// The cost the options ask for, refused below the floor (CheckKdfFloor)
// unless --insecure-kdf was given.
Result<KdfParams> ResolveKdf(const KdfOptions& o);
// The floor check alone, for a cost that did not come from options (passwd
// keeping the current cost).
Status CheckKdfChoice(const KdfParams& k, const KdfOptions& o);
// The cost of a new wrap of a key now wrapped at `stored` (passwd, rekey):
// the stored cost, with what the options set replaced, checked as above.
Result<KdfParams> ResolveRewrapKdf(const KdfParams& stored, const KdfOptions& o);

}  // namespace s3oram::cli

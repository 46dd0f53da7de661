// Where a passphrase comes from: a file (--passfile, a private file as in
// private_file.h), an environment variable, or a prompt on the controlling
// terminal, in that order of preference. Never from the command line, where
// every user of the machine could read it in /proc.
//
// Guarantees: the passphrase is only ever held in a Secret. A passphrase
// read from the environment is wiped from this process's environment
// (overwritten, then unset) so children and /proc/PID/environ readers after
// that point do not see it. A prompt does not echo. Empty passphrases and
// ones longer than kMaxPassphraseBytes are refused.
#pragma once

#include <string>
#include <string_view>

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"

namespace s3oram {

inline constexpr std::size_t kMaxPassphraseBytes = 1024;
inline constexpr const char* kPassphraseEnv = "S3ORAM_PASSPHRASE";
inline constexpr const char* kNewPassphraseEnv = "S3ORAM_NEW_PASSPHRASE";

struct PassphraseSource {
  std::string file;                   // --passfile; empty: not given
  std::string env = kPassphraseEnv;   // variable to consult; empty: none
  bool allow_prompt = true;           // ask on /dev/tty if neither is given
};

// Reads the passphrase. One trailing newline (\n or \r\n) of a file is not
// part of it. `prompt` is shown on the terminal; with `confirm` the user
// types it twice (new passphrases). FailedPrecondition, saying how to pass
// one, if no source is available.
Result<Secret> ReadPassphrase(const PassphraseSource& source, std::string_view prompt,
                              bool confirm = false);

}  // namespace s3oram

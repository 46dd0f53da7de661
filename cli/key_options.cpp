#include "cli/key_options.h"

#include "cli/commands.h"

namespace s3oram::cli {

void AddPassfileOption(CLI::App* cmd, std::string& passfile, const std::string& flag,
                       const std::string& env, const std::string& what) {
  cmd->add_option(flag, passfile,
                  "file holding " + what + " (mode 0600; one trailing newline ignored). "
                  "Without it: $" + env + ", else a prompt on the terminal. Never give a "
                  "passphrase as an argument")
      ->type_name("FILE");
}

void AddKdfOptions(CLI::App* cmd, KdfOptions& o) {
  const KdfParams d = DefaultKdfParams();
  cmd->add_option("--kdf-ops", o.ops,
                  "Argon2id passes for the passphrase key (default " + std::to_string(d.ops) + ")");
  cmd->add_option("--kdf-mem", o.mem,
                  "Argon2id memory, e.g. 256M (default " + HumanBytes(double(d.mem_bytes)) +
                      "); lower values make guessing the passphrase cheaper")
      ->type_name("SIZE");
  cmd->add_flag("--insecure-kdf", o.insecure,
                "allow an Argon2id cost below OWASP's floor (tests and throwaway filesystems "
                "only: the passphrase can then be guessed cheaply from a stolen state file)");
}

Status CheckKdfChoice(const KdfParams& k, const KdfOptions& o) {
  if (o.insecure) return Status::Ok();
  return CheckKdfFloor(k);
}

Result<KdfParams> ResolveKdf(const KdfOptions& o) {
  KdfParams k = DefaultKdfParams();
  if (o.ops != 0) k.ops = o.ops;
  if (!o.mem.empty()) {
    try {
      k.mem_bytes = ParseSize(o.mem);
    } catch (const CLI::ValidationError& e) {
      return Status::InvalidArgument(std::string("--kdf-mem: ") + e.what());
    }
  }
  S3ORAM_RETURN_IF_ERROR(ValidateKdfParams(k));
  S3ORAM_RETURN_IF_ERROR(CheckKdfChoice(k, o));
  return k;
}

Result<KdfParams> ResolveRewrapKdf(const KdfParams& stored, const KdfOptions& o) {
  KdfParams kdf = stored;
  if (o.ops != 0 || !o.mem.empty()) {
    KdfOptions merged = o;
    if (merged.ops == 0) merged.ops = stored.ops;
    if (merged.mem.empty()) merged.mem = std::to_string(stored.mem_bytes);
    S3ORAM_ASSIGN_OR_RETURN(kdf, ResolveKdf(merged));
  }
  // A cost kept from an --insecure-kdf init is refused the same way: the
  // new wrap deserves the floor too.
  S3ORAM_RETURN_IF_ERROR(CheckKdfChoice(kdf, o));
  return kdf;
}

}  // namespace s3oram::cli

// s3oram passwd: change a filesystem's passphrase. The master key is
// unwrapped with the old passphrase and wrapped again under the new one; no
// block is read or written and the servers are not contacted.
#include <cstdio>

#include "cli/commands.h"
#include "cli/key_options.h"
#include "oramcore/client_state.h"
#include "oramcore/key_wrap.h"
#include "oramcore/passphrase.h"

namespace s3oram::cli {

void RegisterPasswd(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("passwd", "change a filesystem's passphrase (data untouched)");
  struct Args {
    std::string state;
    std::string passfile;
    std::string new_passfile;
    KdfOptions kdf;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-s,--state", a->state, "client state file")->required();
  AddPassfileOption(cmd, a->passfile, "--passfile", kPassphraseEnv, "the current passphrase");
  AddPassfileOption(cmd, a->new_passfile, "--new-passfile", kNewPassphraseEnv,
                    "the new passphrase");
  AddKdfOptions(cmd, a->kdf);
  cmd->callback([a, exit_code] {
    auto fail = [exit_code](const Status& s, int code) {
      std::fprintf(stderr, "s3oram passwd: %s\n", s.ToString().c_str());
      *exit_code = code;
    };
    auto store = ClientStateStore::Open(a->state);
    if (!store.ok()) return fail(store.status(), 1);
    const FsConfig& config = (*store)->config();
    // Keep the stored cost unless asked to change it.
    KdfParams kdf = config.key_wrap.kdf;
    if (a->kdf.ops != 0 || !a->kdf.mem.empty()) {
      KdfOptions merged = a->kdf;
      if (merged.ops == 0) merged.ops = kdf.ops;
      if (merged.mem.empty()) merged.mem = std::to_string(kdf.mem_bytes);
      auto resolved = ResolveKdf(merged);
      if (!resolved.ok()) return fail(resolved.status(), 2);
      kdf = *resolved;
    }
    auto old_pass = ReadPassphrase(PassphraseSource{a->passfile, kPassphraseEnv},
                                   "Current passphrase for " + a->state + ": ");
    if (!old_pass.ok()) return fail(old_pass.status(), 2);
    auto master = UnwrapMasterKey(config.key_wrap, *old_pass, config.fs_id);
    if (!master.ok()) return fail(master.status(), 1);
    auto new_pass = ReadPassphrase(PassphraseSource{a->new_passfile, kNewPassphraseEnv},
                                   "New passphrase for " + a->state + ": ", /*confirm=*/true);
    if (!new_pass.ok()) return fail(new_pass.status(), 2);
    auto wrap = WrapMasterKey(*master, *new_pass, config.fs_id, kdf);
    if (!wrap.ok()) return fail(wrap.status(), 1);
    if (Status s = (*store)->ReplaceKeyWrap(*wrap); !s.ok()) {
      // FailedPrecondition: changed, but the old record may linger (exit 3).
      return fail(s, s.code() == Status::Code::kFailedPrecondition ? 3 : 1);
    }
    std::printf("passphrase of %s changed\n", a->state.c_str());
  });
}

}  // namespace s3oram::cli

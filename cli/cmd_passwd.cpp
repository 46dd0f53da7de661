// s3oram passwd: change a filesystem's passphrase. The master key is
// unwrapped with the old passphrase and wrapped again under the new one in
// the state's header, which raises its generation (the key epoch); no block
// is read or written. Then a backup of the state goes to the servers under
// the new wrap and key epoch, and each server deletes every generation of a
// lower one: after that, no backup on the servers opens with the old
// passphrase (wire::BackupPutRequest). The state must not be in use (a
// mount) and must be fresh, and the servers must answer, before anything
// changes. If the upload fails after all, the state keeps the new passphrase
// and the next backup (an unmount, `s3oram backup-state`) finishes the
// revocation; passwd says so and exits 3.
#include <cstdio>

#include "cli/backup_upload.h"
#include "cli/commands.h"
#include "cli/key_options.h"
#include "oramcore/base/fault_point.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/crypto/passphrase.h"
#include "oramcore/state/client_state.h"
#include "oramcore/state/state_file.h"

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
    // Only the clear header changes (state_header.h): the database is sealed
    // under a subkey of the master key, which stays the same.
    auto headers = ReadStateHeader(a->state);
    if (!headers.ok()) return fail(headers.status(), 1);
    // Keep the stored cost unless asked to change it.
    auto resolved_kdf = ResolveRewrapKdf(headers->front().wrap.kdf, a->kdf);
    if (!resolved_kdf.ok()) return fail(resolved_kdf.status(), 2);
    const KdfParams kdf = *resolved_kdf;
    auto old_pass = ReadPassphrase(PassphraseSource{a->passfile, kPassphraseEnv},
                                   "Current passphrase for " + a->state + ": ");
    if (!old_pass.ok()) return fail(old_pass.status(), 2);
    // The servers and a fresh state first, so that nothing changes unless
    // the revoking upload can follow: a stale state (another device used the
    // filesystem since) is refused here, before its wrap changes.
    auto session = BackupSession::Open(a->state, *old_pass);
    if (!session.ok()) return fail(session.status(), 1);
    if (!(*session)->exclusive()) {
      return fail(
          Status::FailedPrecondition(
              a->state + " is in use (the filesystem is mounted, or another s3oram command runs): "
                         "unmount it and run passwd again; nothing was changed"),
          1);
    }
    UnlockedState& unlocked = *(*session)->client().unlocked_state();
    const wire::FsId fs_id = unlocked.header().fs_id;
    auto new_pass = ReadPassphrase(PassphraseSource{a->new_passfile, kNewPassphraseEnv},
                                   "New passphrase for " + a->state + ": ", /*confirm=*/true);
    if (!new_pass.ok()) return fail(new_pass.status(), 2);
    auto wrap = WrapMasterKey(unlocked.master(), *new_pass, fs_id, kdf);
    if (!wrap.ok()) return fail(wrap.status(), 1);
    if (Status s = unlocked.ReplaceKeyWrap(*wrap); !s.ok()) return fail(s, 1);
    const std::uint64_t key_epoch = unlocked.header().generation;
    std::printf("passphrase of %s changed (key epoch %llu)\n", a->state.c_str(),
                static_cast<unsigned long long>(key_epoch));
    std::fflush(stdout);
    FaultPoint("passwd.before_upload");
    auto backup = (*session)->Upload();
    if (!backup.ok()) {
      return fail(backup.status().WithContext(
                      "the state opens only with the new passphrase now, but the servers' backups "
                      "still open with the old one until a backup of key epoch " +
                      std::to_string(key_epoch) +
                      " reaches every server: run `s3oram backup-state --state " + a->state +
                      "` (or mount and unmount) once they are reachable"),
                  3);
    }
    std::printf(
        "backup generation %llu uploaded under the new passphrase; every older generation "
        "was removed from the servers\n",
        static_cast<unsigned long long>(backup->generation));
  });
}

}  // namespace s3oram::cli

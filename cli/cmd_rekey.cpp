// s3oram rekey: rotate a filesystem's master key (oramcore/protocol/rekey.h).
// The state is rewritten under a new random master key wrapped under the new
// passphrase, a backup at the new key epoch goes to the servers (which drop
// every backup of the old one), every block is re-sealed through ordinary
// accesses, the tree is purged of stale copies under the old key, and a
// final backup goes up. The cost is printed first; progress is shown.
//
// Resuming: run the same command again. Once the new state file is renamed
// into place (just before "master key replaced" is printed) only the new
// passphrase opens it, and the rotation goes on from its recorded progress
// (a current passphrase that no longer opens the state is followed by the
// new one when that comes from a file or the environment). Once the
// rotation has ended there is nothing to resume: a killed or failed last
// backup is made up by `s3oram backup-state`.
// Exit 3: the rotation ended but its last backup did not reach the servers.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "cli/backup_upload.h"
#include "cli/commands.h"
#include "cli/key_options.h"
#include "cli/progress.h"
#include "oramcore/base/fault_point.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/crypto/passphrase.h"
#include "oramcore/protocol/rekey.h"
#include "oramcore/state/master_key_switch.h"
#include "oramcore/state/state_file.h"

namespace s3oram::cli {
namespace {

std::string RekeyNumber(std::uint64_t n) { return std::to_string(n); }

std::string DescribeRekeyProgress(const RekeyProgress& r, const OramClient& c) {
  if (r.phase == RekeyProgress::Phase::kReseal) {
    return "re-sealing, at block " + RekeyNumber(r.next_block) + " of " +
           RekeyNumber(c.params().capacity_blocks);
  }
  return "purging, at eviction " + RekeyNumber(c.counters().ne) + " of " +
         RekeyNumber(r.purge_until);
}

}  // namespace

void RegisterRekey(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "rekey", "rotate the master key: re-seal every block and purge the old key's copies");
  struct Args {
    std::string state;
    std::string passfile;
    std::string new_passfile;
    KdfOptions kdf;
    bool plain = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-s,--state", a->state, "client state file")->required();
  AddPassfileOption(cmd, a->passfile, "--passfile", kPassphraseEnv, "the current passphrase");
  AddPassfileOption(cmd, a->new_passfile, "--new-passfile", kNewPassphraseEnv,
                    "the passphrase of the new key (may equal the current one)");
  AddKdfOptions(cmd, a->kdf);
  cmd->add_flag("--plain-progress", a->plain, "progress as plain lines even on a terminal");
  cmd->callback([a, exit_code] {
    auto fail = [exit_code](const Status& s, int code) {
      std::fprintf(stderr, "s3oram rekey: %s\n", s.ToString().c_str());
      *exit_code = code;
    };
    auto headers = ReadStateHeader(a->state);
    if (!headers.ok()) return fail(headers.status(), 1);
    // Keep the stored cost unless asked to change it.
    auto resolved_kdf = ResolveRewrapKdf(headers->front().wrap.kdf, a->kdf);
    if (!resolved_kdf.ok()) return fail(resolved_kdf.status(), 2);
    const KdfParams kdf = *resolved_kdf;
    const PassphraseSource new_source{a->new_passfile, kNewPassphraseEnv};
    const bool new_given = !a->new_passfile.empty() || std::getenv(kNewPassphraseEnv) != nullptr;
    auto pass = ReadPassphrase(PassphraseSource{a->passfile, kPassphraseEnv},
                               "Current passphrase for " + a->state + ": ");
    if (!pass.ok()) return fail(pass.status(), 2);
    std::optional<Secret> new_pass;
    ClientOptions options;
    options.lease_purpose = "s3oram rekey";
    auto opened = OramClient::Open(a->state, *pass, options);
    if (!opened.ok() && opened.status().code() == Status::Code::kPermissionDenied && new_given) {
      // A run killed after the switch: the state opens with the new one.
      auto p = ReadPassphrase(new_source, "New passphrase for " + a->state + ": ");
      if (!p.ok()) return fail(p.status(), 2);
      auto again = OramClient::Open(a->state, *p, options);
      if (!again.ok() && again.status().code() != Status::Code::kPermissionDenied) {
        return fail(again.status(), 1);  // the new passphrase opens it: its real problem
      }
      if (again.ok()) {
        if (!(*again)->rekey()) {
          // Nothing to resume: the rotation ended (or the passphrases were
          // given the wrong way round). Starting another from here would be
          // a rotation the user did not ask for.
          return fail(Status::PermissionDenied(
                          "the current passphrase does not open " + a->state +
                          " and no rekey is under way (the new passphrase opens it: a rekey "
                          "has ended; if it was cut short before its last backup, run "
                          "`s3oram backup-state -s " +
                          a->state + "`)"),
                      2);
        }
        pass = std::move(*p);
        opened = std::move(again);
      }
    }
    if (!opened.ok()) {
      return fail(opened.status(),
                  opened.status().code() == Status::Code::kPermissionDenied ? 2 : 1);
    }
    std::unique_ptr<OramClient> client = std::move(*opened);

    if (client->rekey()) {
      std::printf("resuming the rekey of %s (%s)\n", a->state.c_str(),
                  DescribeRekeyProgress(*client->rekey(), *client).c_str());
    } else {
      if (client->writes_stopped()) return fail(*client->writes_stopped(), 1);
      const RekeyCost cost = EstimateRekey(*client);
      std::printf(
          "rekey of %s: about %s ORAM accesses (%s to re-seal every block held, up to %s to "
          "purge the old key's copies from the tree) and %s evictions; the filesystem cannot be "
          "mounted while this command runs, and an interrupted rekey resumes when run again\n",
          a->state.c_str(), RekeyNumber(cost.total_accesses()).c_str(),
          RekeyNumber(cost.reseal_accesses).c_str(), RekeyNumber(cost.purge_accesses).c_str(),
          RekeyNumber(cost.evictions).c_str());
      std::fflush(stdout);
      if (Status s = client->Close(); !s.ok()) return fail(s, 1);
      client.reset();
      // The state to ourselves from here to the switch's rename.
      int lock_fd = ::open(a->state.c_str(), O_RDONLY | O_CLOEXEC);
      if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
        if (lock_fd >= 0) ::close(lock_fd);
        return fail(Status::FailedPrecondition(a->state + " is in use by another process; "
                                                          "nothing was changed"),
                    1);
      }
      struct Closer {
        int* fd;
        ~Closer() {
          if (*fd >= 0) ::close(*fd);
        }
      } closer{&lock_fd};
      auto p = ReadPassphrase(new_source, "New passphrase for " + a->state + ": ",
                              /*confirm=*/true);
      if (!p.ok()) return fail(p.status(), 2);
      new_pass = std::move(*p);
      auto unlocked = UnlockedState::Unlock(a->state, *pass);
      if (!unlocked.ok()) return fail(unlocked.status(), 1);
      const Secret master = NewMasterKey();
      auto wrap = WrapMasterKey(master, *new_pass, (*unlocked)->header().fs_id, kdf);
      if (!wrap.ok()) return fail(wrap.status(), 1);
      auto header = SwitchMasterKey(**unlocked, *wrap, master, &lock_fd);
      if (!header.ok()) return fail(header.status(), 1);
      unlocked->reset();
      std::printf(
          "master key replaced (key epoch %llu): the state opens only with the new "
          "passphrase now; run this command again with it if the rekey is interrupted\n",
          static_cast<unsigned long long>(header->generation));
      std::fflush(stdout);
      ::close(lock_fd);
      lock_fd = -1;
      pass = std::move(*new_pass);
      FaultPoint("rekey.before_first_upload");
      // The servers drop every backup of the old key epoch once this lands.
      auto backup = UploadStateBackup(a->state, *pass);
      if (backup.ok()) {
        std::printf(
            "backup generation %llu uploaded under the new key; the old key's backups "
            "were removed from the servers\n",
            static_cast<unsigned long long>(backup->generation));
      } else {
        std::fprintf(stderr,
                     "s3oram rekey: warning: %s; the servers keep the old key's backups until "
                     "the rekey's last backup lands\n",
                     backup.status().ToString().c_str());
      }
      auto reopened = OramClient::Open(a->state, *pass, options);
      if (!reopened.ok()) return fail(reopened.status(), 1);
      client = std::move(*reopened);
    }

    std::unique_ptr<Progress> bar;
    std::string phase_now;
    RekeyOptions o;
    o.progress = [&](std::string_view phase, std::uint64_t done, std::uint64_t total) {
      if (phase != phase_now) {
        if (bar) bar->Finish();
        phase_now = std::string(phase);
        bar = std::make_unique<Progress>(phase == "reseal" ? "re-seal blocks" : "purge (evictions)",
                                         total, Progress::Unit::kItems, stderr, a->plain);
      }
      bar->Update(done);
    };
    auto report = RunRekey(*client, o);
    if (bar) bar->Finish();
    if (!report.ok()) {
      return fail(
          report.status().WithContext(
              "the rekey stopped (its progress is saved; run s3oram rekey again, with the new "
              "passphrase, to resume)"),
          1);
    }
    if (Status s = client->Close(); !s.ok()) return fail(s, 1);
    client.reset();
    std::printf(
        "rekey done: %llu blocks re-sealed, %llu purge accesses, %llu evictions; no "
        "block on the servers is sealed under the old key\n",
        static_cast<unsigned long long>(report->resealed),
        static_cast<unsigned long long>(report->purge_accesses),
        static_cast<unsigned long long>(report->evictions));
    std::fflush(stdout);
    FaultPoint("rekey.before_final_upload");
    auto backup = UploadStateBackup(a->state, *pass);
    if (!backup.ok()) {
      return fail(backup.status().WithContext(
                      "the rekey is done, but its backup did not reach the servers: run "
                      "`s3oram backup-state --state " +
                      a->state + "` once they are reachable"),
                  3);
    }
    std::printf("backup generation %llu uploaded\n",
                static_cast<unsigned long long>(backup->generation));
  });
}

}  // namespace s3oram::cli

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

struct RekeyArgs {
  std::string state;
  std::string passfile;
  std::string new_passfile;
  KdfOptions kdf;
  bool plain = false;
};

// One run of the command. The steps share the passphrase in use (the new one
// once the master key is switched), the open client and the exit code; each
// returns false once it has reported why the run stops.
class RekeyRun {
 public:
  RekeyRun(const RekeyArgs& a, int* exit_code)
      : a_(a), exit_code_(exit_code), new_source_{a.new_passfile, kNewPassphraseEnv} {
    options_.lease_purpose = "s3oram rekey";
  }

  void Run() {
    if (!ResolveKdfAndOpen()) return;
    if (client_->rekey()) {
      std::printf("resuming the rekey of %s (%s)\n", a_.state.c_str(),
                  DescribeRekeyProgress(*client_->rekey(), *client_).c_str());
    } else {
      if (!StartRotation()) return;
    }
    if (!ResealAndPurge()) return;
    UploadFinalBackup();
  }

 private:
  bool Fail(const Status& s, int code) {
    std::fprintf(stderr, "s3oram rekey: %s\n", s.ToString().c_str());
    *exit_code_ = code;
    return false;
  }

  bool ResolveKdfAndOpen() {
    auto headers = ReadStateHeader(a_.state);
    if (!headers.ok()) return Fail(headers.status(), 1);
    // Keep the stored cost unless asked to change it.
    auto resolved_kdf = ResolveRewrapKdf(headers->front().wrap.kdf, a_.kdf);
    if (!resolved_kdf.ok()) return Fail(resolved_kdf.status(), 2);
    kdf_ = *resolved_kdf;
    return OpenClient();
  }

  // Opens with the current passphrase or, when a run was killed after the
  // switch, with the new one.
  bool OpenClient() {
    const bool new_given = !a_.new_passfile.empty() || std::getenv(kNewPassphraseEnv) != nullptr;
    auto pass = ReadPassphrase(PassphraseSource{a_.passfile, kPassphraseEnv},
                               "Current passphrase for " + a_.state + ": ");
    if (!pass.ok()) return Fail(pass.status(), 2);
    pass_ = std::move(*pass);
    auto opened = OramClient::Open(a_.state, *pass_, options_);
    if (!opened.ok() && opened.status().code() == Status::Code::kPermissionDenied && new_given) {
      // A run killed after the switch: the state opens with the new one.
      auto p = ReadPassphrase(new_source_, "New passphrase for " + a_.state + ": ");
      if (!p.ok()) return Fail(p.status(), 2);
      auto again = OramClient::Open(a_.state, *p, options_);
      if (!again.ok() && again.status().code() != Status::Code::kPermissionDenied) {
        return Fail(again.status(), 1);  // the new passphrase opens it: its real problem
      }
      if (again.ok()) {
        if (!(*again)->rekey()) {
          // Nothing to resume: the rotation ended (or the passphrases were
          // given the wrong way round). Starting another from here would be
          // a rotation the user did not ask for.
          return Fail(Status::PermissionDenied(
                          "the current passphrase does not open " + a_.state +
                          " and no rekey is under way (the new passphrase opens it: a rekey "
                          "has ended; if it was cut short before its last backup, run "
                          "`s3oram backup-state -s " +
                          a_.state + "`)"),
                      2);
        }
        pass_ = std::move(*p);
        opened = std::move(again);
      }
    }
    if (!opened.ok()) {
      return Fail(opened.status(),
                  opened.status().code() == Status::Code::kPermissionDenied ? 2 : 1);
    }
    client_ = std::move(*opened);
    return true;
  }

  // A new rotation: the cost, the switch to a new master key, the first
  // backup under it, and the client opened again under the new passphrase.
  bool StartRotation() {
    if (client_->writes_stopped()) return Fail(*client_->writes_stopped(), 1);
    const RekeyCost cost = EstimateRekey(*client_);
    std::printf(
        "rekey of %s: about %s ORAM accesses (%s to re-seal every block held, up to %s to "
        "purge the old key's copies from the tree) and %s evictions; the filesystem cannot be "
        "mounted while this command runs, and an interrupted rekey resumes when run again\n",
        a_.state.c_str(), RekeyNumber(cost.total_accesses()).c_str(),
        RekeyNumber(cost.reseal_accesses).c_str(), RekeyNumber(cost.purge_accesses).c_str(),
        RekeyNumber(cost.evictions).c_str());
    std::fflush(stdout);
    if (Status s = client_->Close(); !s.ok()) return Fail(s, 1);
    client_.reset();
    if (!SwitchKey()) return false;
    FaultPoint("rekey.before_first_upload");
    // The servers drop every backup of the old key epoch once this lands.
    auto backup = UploadStateBackup(a_.state, *pass_);
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
    auto reopened = OramClient::Open(a_.state, *pass_, options_);
    if (!reopened.ok()) return Fail(reopened.status(), 1);
    client_ = std::move(*reopened);
    return true;
  }

  // Rewrites the state under a new master key wrapped under the new
  // passphrase, which is the one in use from then on.
  bool SwitchKey() {
    // The state to ourselves from here to the switch's rename.
    int lock_fd = ::open(a_.state.c_str(), O_RDONLY | O_CLOEXEC);
    if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      if (lock_fd >= 0) ::close(lock_fd);
      return Fail(Status::FailedPrecondition(a_.state + " is in use by another process; "
                                                        "nothing was changed"),
                  1);
    }
    struct Closer {
      int* fd;
      ~Closer() {
        if (*fd >= 0) ::close(*fd);
      }
    } closer{&lock_fd};
    auto p = ReadPassphrase(new_source_, "New passphrase for " + a_.state + ": ",
                            /*confirm=*/true);
    if (!p.ok()) return Fail(p.status(), 2);
    Secret new_pass = std::move(*p);
    auto unlocked = UnlockedState::Unlock(a_.state, *pass_);
    if (!unlocked.ok()) return Fail(unlocked.status(), 1);
    const Secret master = NewMasterKey();
    auto wrap = WrapMasterKey(master, new_pass, (*unlocked)->header().fs_id, kdf_);
    if (!wrap.ok()) return Fail(wrap.status(), 1);
    auto header = SwitchMasterKey(**unlocked, *wrap, master, &lock_fd);
    if (!header.ok()) return Fail(header.status(), 1);
    unlocked->reset();
    std::printf(
        "master key replaced (key epoch %llu): the state opens only with the new "
        "passphrase now; run this command again with it if the rekey is interrupted\n",
        static_cast<unsigned long long>(header->generation));
    std::fflush(stdout);
    ::close(lock_fd);
    lock_fd = -1;
    pass_ = std::move(new_pass);
    return true;
  }

  // Re-seals every block and purges the old key's copies, from the recorded
  // progress on; closes the client when done.
  bool ResealAndPurge() {
    std::unique_ptr<Progress> bar;
    std::string phase_now;
    RekeyOptions o;
    o.progress = [&](std::string_view phase, std::uint64_t done, std::uint64_t total) {
      if (phase != phase_now) {
        if (bar) bar->Finish();
        phase_now = std::string(phase);
        bar = std::make_unique<Progress>(phase == "reseal" ? "re-seal blocks" : "purge (evictions)",
                                         total, Progress::Unit::kItems, stderr, a_.plain);
      }
      bar->Update(done);
    };
    auto report = RunRekey(*client_, o);
    if (bar) bar->Finish();
    if (!report.ok()) {
      return Fail(
          report.status().WithContext(
              "the rekey stopped (its progress is saved; run s3oram rekey again, with the new "
              "passphrase, to resume)"),
          1);
    }
    if (Status s = client_->Close(); !s.ok()) return Fail(s, 1);
    client_.reset();
    std::printf(
        "rekey done: %llu blocks re-sealed, %llu purge accesses, %llu evictions; no "
        "block on the servers is sealed under the old key\n",
        static_cast<unsigned long long>(report->resealed),
        static_cast<unsigned long long>(report->purge_accesses),
        static_cast<unsigned long long>(report->evictions));
    std::fflush(stdout);
    return true;
  }

  // The rotation has ended: a backup that does not land is exit 3, made up
  // by `s3oram backup-state`.
  void UploadFinalBackup() {
    FaultPoint("rekey.before_final_upload");
    auto backup = UploadStateBackup(a_.state, *pass_);
    if (!backup.ok()) {
      Fail(backup.status().WithContext(
               "the rekey is done, but its backup did not reach the servers: run "
               "`s3oram backup-state --state " +
               a_.state + "` once they are reachable"),
           3);
      return;
    }
    std::printf("backup generation %llu uploaded\n",
                static_cast<unsigned long long>(backup->generation));
  }

  const RekeyArgs& a_;
  int* exit_code_;
  const PassphraseSource new_source_;
  ClientOptions options_;
  KdfParams kdf_;
  std::optional<Secret> pass_;
  std::unique_ptr<OramClient> client_;
};

}  // namespace

void RegisterRekey(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "rekey", "rotate the master key: re-seal every block and purge the old key's copies");
  auto a = std::make_shared<RekeyArgs>();
  cmd->add_option("-s,--state", a->state, "client state file")->required();
  AddPassfileOption(cmd, a->passfile, "--passfile", kPassphraseEnv, "the current passphrase");
  AddPassfileOption(cmd, a->new_passfile, "--new-passfile", kNewPassphraseEnv,
                    "the passphrase of the new key (may equal the current one)");
  AddKdfOptions(cmd, a->kdf);
  cmd->add_flag("--plain-progress", a->plain, "progress as plain lines even on a terminal");
  cmd->callback([a, exit_code] { RekeyRun(*a, exit_code).Run(); });
}

}  // namespace s3oram::cli

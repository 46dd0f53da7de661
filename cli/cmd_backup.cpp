// s3oram backup-state, restore, attach and refresh-state: the client state as
// an encrypted, secret-shared blob on the servers (oramcore/protocol/state_backup.h),
// taken on demand (the FUSE daemon also takes one at every clean unmount),
// restored on a machine that has only the server addresses and keys, a client
// key and the passphrase (attach: as a second device, with the mount command),
// and fetched again over a state another device has made stale.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "cli/backup_upload.h"
#include "cli/commands.h"
#include "cli/key_options.h"
#include "cli/progress.h"
#include "fused/fsck.h"
#include "oramcore/crypto/curve_keys.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/crypto/subkeys.h"
#include "oramcore/protocol/client.h"
#include "oramcore/protocol/state_backup.h"
#include "oramcore/state/state_file.h"

namespace s3oram::cli {

void RegisterBackupState(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "backup-state",
      "encrypt the client state and store it secret-shared on the servers (a new generation)");
  struct Args {
    std::string state;
    std::string passfile;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-s,--state", a->state, "client state file")->required();
  AddPassfileOption(cmd, a->passfile);
  cmd->callback([a, exit_code] {
    auto fail = [exit_code](const Status& s) {
      std::fprintf(stderr, "s3oram backup-state: %s\n", s.ToString().c_str());
      *exit_code = 1;
    };
    auto pass = ReadPassphrase(PassphraseSource{a->passfile}, "Passphrase for " + a->state + ": ");
    if (!pass.ok()) {
      std::fprintf(stderr, "s3oram backup-state: %s\n", pass.status().ToString().c_str());
      *exit_code = 2;
      return;
    }
    auto r = UploadStateBackup(a->state, *pass);
    if (!r.ok()) return fail(r.status());
    std::printf("backed up %s as generation %llu: %s of state padded to %s, %s per server\n",
                a->state.c_str(), static_cast<unsigned long long>(r->generation),
                HumanBytes(double(r->state_bytes)).c_str(),
                HumanBytes(double(r->padded_bytes)).c_str(),
                HumanBytes(double(r->share_elems) * sizeof(field::Elem)).c_str());
  });
}

namespace {

// What restore and attach share: where the filesystem is and who this
// machine is.
struct RestoreArgs {
  std::string state;
  std::vector<std::string> servers;
  std::vector<std::string> server_keys;
  std::string client_key;
  std::string passfile;
  std::uint64_t generation = 0;
  bool force = false;
  bool dry_run = false;
  int timeout_ms = 30000;
};

void AddRestoreOptions(CLI::App* cmd, RestoreArgs& a, const std::string& state_help) {
  cmd->add_option("-s,--state", a.state, state_help)->required();
  cmd->add_option("--server", a.servers,
                  "server endpoint, once per server in index order (e.g. tcp://host:7300)")
      ->required();
  cmd->add_option("--server-key", a.server_keys,
                  "CURVE public key of each server, in the same order as --server: 40 Z85 "
                  "characters or a .pub file")
      ->required();
  cmd->add_option("--client-key", a.client_key,
                  "this machine's CURVE secret key file (mode 0600); the servers must list its "
                  "public key in authorized_clients")
      ->required();
  AddPassfileOption(cmd, a.passfile);
  cmd->add_option("--generation", a.generation,
                  "restore this backup generation (default: the newest that authenticates)");
  cmd->add_flag("--force", a.force,
                "restore even a backup older than the servers (what changed since is lost)");
  cmd->add_flag("--dry-run", a.dry_run,
                "do everything but create the state: check the backup against the servers and "
                "name every file part a (forced) restore would lose");
  cmd->add_option("--timeout-ms", a.timeout_ms, "per-request timeout")->capture_default_str();
}

Result<RestoreOptions> MakeRestoreOptions(const RestoreArgs& a) {
  RestoreOptions o;
  o.state_path = std::filesystem::absolute(a.state).string();
  o.servers = a.servers;
  o.generation = a.generation;
  o.force = a.force;
  o.dry_run = a.dry_run;
  o.timeout = std::chrono::milliseconds(a.timeout_ms);
  if (a.server_keys.size() != a.servers.size()) {
    return Status::InvalidArgument("give one --server-key per --server (" +
                                   std::to_string(a.servers.size()) + " servers, " +
                                   std::to_string(a.server_keys.size()) + " keys)");
  }
  for (std::size_t i = 0; i < a.server_keys.size(); ++i) {
    auto key = ResolvePublicKey(a.server_keys[i], "--server-key " + std::to_string(i));
    if (!key.ok()) return key.status();
    o.server_keys.push_back(*key);
  }
  // Absolute: the FUSE daemon runs from /.
  o.client_key_file = std::filesystem::absolute(a.client_key).string();
  return o;
}

void PrintRestoreWarnings(const char* command, const RestoreReport& r) {
  for (const auto& w : r.warnings)
    std::fprintf(stderr, "s3oram %s: warning: %s\n", command, w.c_str());
}

// A forced restore forgot blocks (RestoreReport::lost_blocks): name the file
// and the part of it each one held, as fsck does, so that nothing reads back
// as zeros unannounced (the filesystem answers EIO for them until `fsck -y
// --zero-damaged`).
void PrintLostFiles(const char* command, const std::string& state, const Secret& passphrase,
                    const RestoreReport& r, bool would = false) {
  auto unlocked = UnlockedState::Unlock(state, passphrase);
  auto snap = unlocked.ok() ? fs::FsckSnapshot::Load(**unlocked)
                            : Result<fs::FsckSnapshot>(unlocked.status());
  if (!snap.ok()) {
    std::fprintf(stderr, "s3oram %s: %zu blocks were lost; naming their files failed: %s\n",
                 command, r.lost_blocks.size(), snap.status().ToString().c_str());
    return;
  }
  const auto owners = fs::DescribeBlockOwners(*snap, r.lost_blocks);
  if (would) {
    std::fprintf(stderr,
                 "s3oram %s: a forced restore of generation %llu would lose %zu ORAM blocks, "
                 "%zu parts of files (they would read as errors, EIO, until `s3oram fsck -y "
                 "--zero-damaged`):\n",
                 command, static_cast<unsigned long long>(r.generation), r.lost_blocks.size(),
                 owners.size());
    for (const auto& o : owners) std::fprintf(stderr, "  would lose: %s\n", o.c_str());
    return;
  }
  std::fprintf(stderr,
               "s3oram %s: %zu ORAM blocks could not be restored; %zu parts of files are lost "
               "and read as errors (EIO) until `s3oram fsck -y --zero-damaged -s %s` lets them "
               "read as zeros:\n",
               command, r.lost_blocks.size(), owners.size(), state.c_str());
  for (const auto& o : owners) std::fprintf(stderr, "  lost: %s\n", o.c_str());
}

// Names the files a forced restore would lose, restoring nothing: after a
// refusal of an older backup, and for --dry-run.
void PreviewForcedRestore(const char* command, RestoreOptions o, const Secret& passphrase) {
  o.force = true;
  o.dry_run = true;
  o.preview = [&](const std::string& restored, const RestoreReport& r) {
    if (r.lost_blocks.empty()) {
      std::fprintf(stderr, "s3oram %s: a forced restore of generation %llu would lose no block\n",
                   command, static_cast<unsigned long long>(r.generation));
    } else {
      PrintLostFiles(command, restored, passphrase, r, /*would=*/true);
    }
    return Status::Ok();
  };
  auto r = RestoreState(o, passphrase);
  if (!r.ok()) {
    std::fprintf(stderr, "s3oram %s: what a forced restore would lose cannot be listed: %s\n",
                 command, r.status().ToString().c_str());
  }
}

std::string RestoredText(const std::string& state, const RestoreReport& r) {
  std::string used;
  for (std::size_t i : r.servers_used) used += (used.empty() ? "" : ", ") + std::to_string(i);
  return state + " from backup generation " + std::to_string(r.generation) + " (" +
         HumanBytes(double(r.state_bytes)) + " of state, " + std::to_string(r.counters.ne) +
         " evictions, seq " + std::to_string(r.counters.seq) + "; shares of servers " + used + ")";
}

// Runs restore or attach; the report, or nullopt after printing the error.
std::optional<RestoreReport> RunRestore(const char* command, const RestoreArgs& a, int* exit_code) {
  auto options = MakeRestoreOptions(a);
  if (!options.ok()) {
    std::fprintf(stderr, "s3oram %s: %s\n", command, options.status().ToString().c_str());
    *exit_code = 2;
    return std::nullopt;
  }
  auto pass = ReadPassphrase(PassphraseSource{a.passfile}, "Passphrase of the filesystem: ");
  if (!pass.ok()) {
    std::fprintf(stderr, "s3oram %s: %s\n", command, pass.status().ToString().c_str());
    *exit_code = 2;
    return std::nullopt;
  }
  if (options->dry_run) {
    // What this restore would do, and what it would lose; nothing is created.
    RestoreOptions o = *options;
    o.preview = [&](const std::string& restored, const RestoreReport& r) {
      PrintRestoreWarnings(command, r);
      if (!r.lost_blocks.empty()) PrintLostFiles(command, restored, *pass, r, /*would=*/true);
      return Status::Ok();
    };
    auto r = RestoreState(o, *pass);
    if (!r.ok()) {
      std::fprintf(stderr, "s3oram %s: dry run: %s\n", command, r.status().ToString().c_str());
      if (IsOlderThanServersRefusal(r.status())) PreviewForcedRestore(command, *options, *pass);
      *exit_code = 1;
    } else {
      std::printf(
          "dry run: %s would be restored from backup generation %llu (%zu blocks "
          "lost); nothing was written\n",
          a.state.c_str(), static_cast<unsigned long long>(r->generation), r->lost_blocks.size());
    }
    return std::nullopt;
  }
  std::unique_ptr<Progress> progress;
  auto r = RestoreState(*options, *pass, TransferProgress(command, progress));
  if (progress) progress->Finish();
  if (!r.ok()) {
    std::fprintf(stderr, "s3oram %s: %s\n", command, r.status().ToString().c_str());
    // Refused as older than the servers: say what --force would give up.
    if (IsOlderThanServersRefusal(r.status())) PreviewForcedRestore(command, *options, *pass);
    *exit_code = 1;
    return std::nullopt;
  }
  PrintRestoreWarnings(command, *r);
  if (!r->lost_blocks.empty()) PrintLostFiles(command, options->state_path, *pass, *r);
  return std::move(r).value();
}

// A path as a shell would need it in the printed command.
std::string ShellQuoted(const std::string& s) {
  if (s.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:@,") ==
      std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

void RegisterRestore(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "restore", "recreate a client state from its backup on the servers (new machine)");
  auto a = std::make_shared<RestoreArgs>();
  AddRestoreOptions(cmd, *a, "client state file to create (must not exist)");
  cmd->callback([a, exit_code] {
    auto r = RunRestore("restore", *a, exit_code);
    if (r) std::printf("restored %s\n", RestoredText(a->state, *r).c_str());
  });
}

void RegisterAttach(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "attach",
      "set up this machine as another device of an existing filesystem: fetch the newest state "
      "backup from the servers into a new encrypted state and print the mount command");
  auto a = std::make_shared<RestoreArgs>();
  auto mountpoint = std::make_shared<std::string>();
  AddRestoreOptions(cmd, *a,
                    "client state file to create (must not exist; its directory is created "
                    "mode 0700 if missing)");
  cmd->add_option("--mountpoint", *mountpoint,
                  "where the printed mount command mounts it (default ~/s3oramfs)");
  cmd->callback([a, mountpoint, exit_code] {
    const std::filesystem::path state = std::filesystem::absolute(a->state);
    std::error_code ec;
    if (!state.parent_path().empty() && !std::filesystem::exists(state.parent_path(), ec)) {
      std::filesystem::create_directories(state.parent_path(), ec);
      if (ec) {
        std::fprintf(stderr, "s3oram attach: cannot create %s: %s\n", state.parent_path().c_str(),
                     ec.message().c_str());
        *exit_code = 1;
        return;
      }
      std::filesystem::permissions(state.parent_path(), std::filesystem::perms::owner_all,
                                   std::filesystem::perm_options::replace, ec);
    }
    auto r = RunRestore("attach", *a, exit_code);
    if (!r) return;
    std::string mnt = *mountpoint;
    if (mnt.empty()) {
      const char* home = std::getenv("HOME");
      mnt = std::string(home != nullptr && *home != '\0' ? home : ".") + "/s3oramfs";
    }
    mnt = std::filesystem::absolute(mnt).string();
    std::printf("attached %s\n", RestoredText(state.string(), *r).c_str());
    std::printf(
        "This device now has its own encrypted copy of the filesystem's state. One device "
        "mounts at a time; each clean unmount stores the state on the servers, and a "
        "device whose copy is older is refused until it refreshes "
        "(-o refresh_state).\nMount it with:\n  mkdir -p %s && s3oramfs-fused %s %s\n"
        "or:\n  mount -t s3oramfs %s %s\n",
        ShellQuoted(mnt).c_str(), ShellQuoted(state.string()).c_str(), ShellQuoted(mnt).c_str(),
        ShellQuoted(state.string()).c_str(), ShellQuoted(mnt).c_str());
  });
}

void RegisterRefreshState(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "refresh-state",
      "replace a stale client state (another device mounted since) with the newest backup on "
      "the servers");
  struct Args {
    std::string state;
    std::string passfile;
    int timeout_ms = 30000;
    bool discard_local_changes = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-s,--state", a->state, "client state file")->required();
  AddPassfileOption(cmd, a->passfile);
  cmd->add_option("--timeout-ms", a->timeout_ms, "per-request timeout")->capture_default_str();
  cmd->add_flag("--discard-local-changes", a->discard_local_changes,
                "replace the state even if it holds changes no backup has (its last session "
                "ended without uploading it); the old file is kept as STATE.discarded-<time>");
  cmd->callback([a, exit_code] {
    auto pass = ReadPassphrase(PassphraseSource{a->passfile}, "Passphrase for " + a->state + ": ");
    if (!pass.ok()) {
      std::fprintf(stderr, "s3oram refresh-state: %s\n", pass.status().ToString().c_str());
      *exit_code = 2;
      return;
    }
    std::unique_ptr<Progress> progress;
    auto r = RefreshState(std::filesystem::absolute(a->state).string(), *pass,
                          std::chrono::milliseconds(a->timeout_ms),
                          TransferProgress("refresh-state", progress), a->discard_local_changes);
    if (progress) progress->Finish();
    if (!r.ok()) {
      std::fprintf(stderr, "s3oram refresh-state: %s\n", r.status().ToString().c_str());
      *exit_code = 1;
      return;
    }
    PrintRestoreWarnings("refresh-state", *r);
    if (!r->discarded_copy.empty()) {
      std::printf("the replaced state, with its changes that were in no backup, is kept as %s\n",
                  r->discarded_copy.c_str());
    }
    std::printf("refreshed %s\n", RestoredText(a->state, *r).c_str());
  });
}

}  // namespace s3oram::cli

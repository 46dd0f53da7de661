// s3oram backup-state and s3oram restore: the client state as an encrypted,
// secret-shared blob on the servers (oramcore/state_backup.h), taken on
// demand (the FUSE daemon also takes one at every clean unmount) and restored
// on a machine that has only the server addresses and keys, a client key and
// the passphrase.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/key_options.h"
#include "cli/progress.h"
#include "oramcore/client.h"
#include "oramcore/curve_keys.h"
#include "oramcore/key_wrap.h"
#include "oramcore/state_backup.h"

namespace s3oram::cli {
namespace {

// Shares smaller than this move in well under a second: no progress line.
constexpr std::uint64_t kProgressFromBytes = std::uint64_t{16} << 20;

// A progress callback that creates the Progress only for a large transfer.
BackupProgressFn MakeProgress(const std::string& label, std::unique_ptr<Progress>& holder) {
  return [&holder, label](std::uint64_t done, std::uint64_t total) {
    if (!holder) {
      if (total < kProgressFromBytes) return;
      holder = std::make_unique<Progress>(label, total, Progress::Unit::kBytes);
    }
    holder->Update(done);
  };
}

}  // namespace

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
    // Read-only: no new epoch, so a daemon that has the filesystem mounted
    // is not fenced off (its uploads and this one use the same epoch). The
    // backup key comes from the passphrase here instead of from Open.
    auto client = OramClient::OpenReadOnly(a->state, *pass);
    if (!client.ok()) return fail(client.status());
    const Secret key = DeriveBackupKey((*client)->unlocked_state()->master());
    std::unique_ptr<Progress> progress;
    auto r = BackupStateWithKey(**client, key, MakeProgress("backup", progress));
    if (progress) progress->Finish();
    if (!r.ok()) return fail(r.status());
    std::printf("backed up %s as generation %llu: %s of state padded to %s, %s per server\n",
                a->state.c_str(), static_cast<unsigned long long>(r->generation),
                HumanBytes(double(r->state_bytes)).c_str(),
                HumanBytes(double(r->padded_bytes)).c_str(),
                HumanBytes(double(r->share_elems) * sizeof(field::Elem)).c_str());
  });
}

void RegisterRestore(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "restore", "recreate a client state from its backup on the servers (new machine)");
  struct Args {
    std::string state;
    std::vector<std::string> servers;
    std::vector<std::string> server_keys;
    std::string client_key;
    std::string passfile;
    std::uint64_t generation = 0;
    bool force = false;
    int timeout_ms = 30000;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-s,--state", a->state, "client state file to create (must not exist)")
      ->required();
  cmd->add_option("--server", a->servers,
                  "server endpoint, once per server in index order (e.g. tcp://host:7300)")
      ->required();
  cmd->add_option("--server-key", a->server_keys,
                  "CURVE public key of each server, in the same order as --server: 40 Z85 "
                  "characters or a .pub file")
      ->required();
  cmd->add_option("--client-key", a->client_key,
                  "this machine's CURVE secret key file (mode 0600); the servers must list its "
                  "public key in authorized_clients")
      ->required();
  AddPassfileOption(cmd, a->passfile);
  cmd->add_option("--generation", a->generation,
                  "restore this backup generation (default: the newest that authenticates)");
  cmd->add_flag("--force", a->force,
                "restore even a backup older than the servers (what changed since is lost)");
  cmd->add_option("--timeout-ms", a->timeout_ms, "per-request timeout")->capture_default_str();
  cmd->callback([a, exit_code] {
    auto usage = [exit_code](const Status& s) {
      std::fprintf(stderr, "s3oram restore: %s\n", s.ToString().c_str());
      *exit_code = 2;
    };
    RestoreOptions o;
    o.state_path = a->state;
    o.servers = a->servers;
    o.generation = a->generation;
    o.force = a->force;
    o.timeout = std::chrono::milliseconds(a->timeout_ms);
    if (a->server_keys.size() != a->servers.size()) {
      return usage(Status::InvalidArgument("give one --server-key per --server (" +
                                           std::to_string(a->servers.size()) + " servers, " +
                                           std::to_string(a->server_keys.size()) + " keys)"));
    }
    for (std::size_t i = 0; i < a->server_keys.size(); ++i) {
      auto key = ResolvePublicKey(a->server_keys[i], "--server-key " + std::to_string(i));
      if (!key.ok()) return usage(key.status());
      o.server_keys.push_back(*key);
    }
    // Absolute: the FUSE daemon runs from /.
    o.client_key_file = std::filesystem::absolute(a->client_key).string();
    auto pass = ReadPassphrase(PassphraseSource{a->passfile}, "Passphrase of the filesystem: ");
    if (!pass.ok()) return usage(pass.status());
    std::unique_ptr<Progress> progress;
    auto r = RestoreState(o, *pass, MakeProgress("restore", progress));
    if (progress) progress->Finish();
    if (!r.ok()) {
      std::fprintf(stderr, "s3oram restore: %s\n", r.status().ToString().c_str());
      *exit_code = 1;
      return;
    }
    for (const auto& w : r->warnings) {
      std::fprintf(stderr, "s3oram restore: warning: %s\n", w.c_str());
    }
    std::string used;
    for (std::size_t i : r->servers_used) used += (used.empty() ? "" : ", ") + std::to_string(i);
    std::printf("restored %s from backup generation %llu (%s of state, %llu evictions, seq %llu; "
                "shares of servers %s)\n",
                a->state.c_str(), static_cast<unsigned long long>(r->generation),
                HumanBytes(double(r->state_bytes)).c_str(),
                static_cast<unsigned long long>(r->counters.ne),
                static_cast<unsigned long long>(r->counters.seq), used.c_str());
  });
}

}  // namespace s3oram::cli

// s3oram fsck: check (and with -y repair) a filesystem's client state and
// blocks. The checks live in fused/fsck.h; this is the command line: the
// order of the phases, when the ORAM is opened, what is repaired, progress,
// and exit codes as fsck(8) (an OR of: 0 clean, 1 errors corrected, 4 errors
// left uncorrected, 8 operational error, 16 usage error, 32 cancelled).
//
// Order. Phases 1 and 2 read a snapshot of the state file and change
// nothing. The ORAM client is then opened (needed for the block phase, and
// for repairs so that Open refuses a filesystem that is in use); repairs of
// phases 1 and 2 are applied while that client has made no access, each phase
// in one transaction, and the client is opened again so its position map is
// the repaired one before the blocks are read. A position map that the
// client cannot load (a position outside the tree, two blocks in one slot)
// makes Open fail: then the passphrase is checked on its own and phase 1's
// repairs are applied first (no client, mounted or not, can have such a
// state open, since none can load it).
//
// -n never writes anything, and with --no-blocks does not even open the
// ORAM. Reading blocks is an ordinary ORAM access: each read rewrites the
// block to the root under a new version, as every access does.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/key_options.h"
#include "cli/progress.h"
#include "fused/fsck.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/crypto/passphrase.h"
#include "oramcore/protocol/client.h"
#include "oramcore/protocol/scrub.h"
#include "oramcore/protocol/state_backup.h"
#include "oramcore/state/client_state.h"
#include "oramcore/state/state_file.h"

namespace s3oram::cli {
namespace {

// Anyone refused the filesystem while fsck runs sees what holds it.
ClientOptions FsckClientOptions() {
  ClientOptions o;
  o.lease_purpose = "s3oram fsck";
  return o;
}

std::atomic<bool> g_cancel{false};

extern "C" void OnInterrupt(int) { g_cancel.store(true); }

struct Args {
  std::string state;
  std::string passfile;
  bool dry_run = false;
  bool yes = false;
  bool no_blocks = false;
  bool zero_damaged = false;
};

// Exit codes (fsck(8)).
constexpr int kCorrected = 1;
constexpr int kUncorrected = 4;
constexpr int kOperational = 8;
constexpr int kCancelled = 32;

struct Tally {
  std::uint64_t errors = 0;
  std::uint64_t corrected = 0;
};

void Print(const char* title, const std::vector<fs::FsckProblem>& problems,
           const std::vector<std::string>& notes, bool repaired) {
  std::printf("%s\n", title);
  for (const auto& n : notes) std::printf("  note: %s\n", n.c_str());
  for (const auto& p : problems) {
    const char* tag = !p.repairable ? " [left uncorrected]"
                      : repaired    ? " [corrected]"
                                    : " [repairable with -y]";
    std::printf("  error: %s%s\n", p.message.c_str(), tag);
  }
  if (problems.empty()) std::printf("  ok\n");
  std::fflush(stdout);
}

void Count(Tally& t, const std::vector<fs::FsckProblem>& problems, bool repaired) {
  for (const auto& p : problems) {
    ++t.errors;
    if (repaired && p.repairable) ++t.corrected;
  }
}

// The mount point of a local s3oramfs mount of `state` (the daemon names
// the absolute state path as the mount's source), or "". A safety net for
// this machine only; the single-writer lease taken by OramClient::Open is
// what excludes writers elsewhere.
std::string MountedAt(const std::string& state) {
  char* abs = ::realpath(state.c_str(), nullptr);
  if (abs == nullptr) return "";
  const std::string want = abs;
  std::free(abs);
  // mountinfo octal-escapes space, tab, newline and backslash.
  auto unescape = [](const std::string& f) {
    std::string out;
    for (std::size_t i = 0; i < f.size(); ++i) {
      const bool octal =
          f[i] == '\\' && i + 3 < f.size() && f.find_first_not_of("01234567", i + 1) >= i + 4;
      if (octal) {
        out.push_back(static_cast<char>(std::stoi(f.substr(i + 1, 3), nullptr, 8)));
        i += 3;
      } else {
        out.push_back(f[i]);
      }
    }
    return out;
  };
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> f;
    for (std::string w; ls >> w;) f.push_back(w);
    std::size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 5 || dash + 2 >= f.size()) continue;
    if (f[dash + 1] == "fuse.s3oramfs" && unescape(f[dash + 2]) == want) return unescape(f[4]);
  }
  return "";
}

bool AskToRepair(std::uint64_t repairable) {
  if (repairable == 0 || ::isatty(STDIN_FILENO) != 1 || ::isatty(STDOUT_FILENO) != 1) return false;
  std::printf("Repair %llu problem(s)? [y/N] ", static_cast<unsigned long long>(repairable));
  std::fflush(stdout);
  std::string line;
  if (!std::getline(std::cin, line)) return false;
  return line == "y" || line == "Y" || line == "yes";
}

int Run(const Args& a) {
  auto fail = [](const std::string& what, int code) {
    std::fprintf(stderr, "s3oram fsck: %s\n", what.c_str());
    return code;
  };
  // Identification first (a clear message for a file that is not a state,
  // before any passphrase is asked for), with nothing changed.
  if (auto header = ReadStateHeader(a.state); !header.ok()) {
    return fail(header.status().ToString(), kOperational);
  }
  if (std::string mnt = MountedAt(a.state); !mnt.empty()) {
    return fail(a.state + " is mounted on " + mnt + ": unmount it first", kOperational);
  }
  // The state is sealed: every phase needs the passphrase.
  auto pass = ReadPassphrase(PassphraseSource{a.passfile, kPassphraseEnv},
                             "Passphrase for " + a.state + ": ");
  if (!pass.ok()) return fail(pass.status().ToString(), kOperational);
  std::optional<Secret> passphrase = std::move(pass).value();
  auto opened = UnlockedState::Unlock(a.state, *passphrase);
  if (!opened.ok()) return fail(opened.status().ToString(), kOperational);
  std::shared_ptr<UnlockedState> unlocked(std::move(*opened));
  if (auto store = ClientStateStore::Open(unlocked); !store.ok()) {
    return fail(store.status().ToString(), kOperational);
  }
  auto snap = fs::FsckSnapshot::Load(*unlocked);
  if (!snap.ok()) return fail(snap.status().ToString(), kOperational);
  fs::FsckOptions options;
  options.zero_damaged = a.zero_damaged;

  fs::FsckPhaseResult p1 = fs::CheckOram(*snap, options);
  std::set<fs::BlockId> deleted;
  for (const auto& r : p1.repairs) {
    if (r.kind == fs::FsckRepair::Kind::kDeletePosition) deleted.insert(r.a);
  }
  fs::FsckPhaseResult p2 = fs::CheckMetadata(*snap, options, deleted);
  const std::uint64_t repairable =
      p1.problems.size() - p1.unrepairable() + p2.problems.size() - p2.unrepairable();
  bool repair = a.yes;
  if (!repair && !a.dry_run) {
    // Report first so the question is about what the user has seen.
    Print("Phase 1: ORAM state (position map, counters, pending operations)", p1.problems, p1.notes,
          false);
    Print("Phase 2: filesystem metadata (tree, link counts, block maps)", p2.problems, p2.notes,
          false);
    repair = AskToRepair(repairable);
  } else {
    Print("Phase 1: ORAM state (position map, counters, pending operations)", p1.problems, p1.notes,
          repair);
    Print("Phase 2: filesystem metadata (tree, link counts, block maps)", p2.problems, p2.notes,
          repair);
  }
  if (g_cancel.load()) return fail("cancelled; nothing was changed", kCancelled);

  Tally tally;
  std::unique_ptr<OramClient> client;
  const bool need_client = !a.no_blocks || repair;
  if (need_client && p1.position_map_loadable) {
    auto c = OramClient::Open(a.state, *passphrase, FsckClientOptions());
    if (!c.ok()) return fail("cannot open " + a.state + ": " + c.status().ToString(), kOperational);
    client = std::move(c).value();
  }
  if (g_cancel.load()) return fail("cancelled; nothing was changed", kCancelled);
  if (repair) {
    if (Status s = fs::ApplyFsckRepairs(*unlocked, p1.repairs); !s.ok()) {
      return fail(s.ToString(), kOperational);
    }
    if (Status s = fs::ApplyFsckRepairs(*unlocked, p2.repairs); !s.ok()) {
      return fail(s.ToString(), kOperational);
    }
    client.reset();  // reopened below with the repaired position map
  }
  Count(tally, p1.problems, repair);
  Count(tally, p2.problems, repair);

  std::uint64_t blocks_read = 0;
  if (!a.no_blocks) {
    std::vector<fs::FsckProblem> p3problems;
    std::vector<std::string> p3notes;
    if (!client) {
      auto c = OramClient::Open(a.state, *passphrase, FsckClientOptions());
      if (c.ok()) {
        client = std::move(c).value();
      } else if (p1.position_map_loadable || c.status().code() != Status::Code::kCorruption) {
        // Anything but the unloadable map phase 1 found is operational.
        return fail("cannot open " + a.state + ": " + c.status().ToString(), kOperational);
      }
    }
    if (!client) {
      // Phase 1 reported why (and the errors count as uncorrected).
      p3notes.push_back(
          "skipped: the position map cannot be loaded until the errors of phase 1 are "
          "repaired");
    } else {
      // The metadata may have changed with the repairs: read the blocks the
      // files map now.
      if (repair) {
        auto again = fs::FsckSnapshot::Load(*unlocked);
        if (!again.ok()) return fail(again.status().ToString(), kOperational);
        *snap = std::move(again).value();
      }
      std::optional<Progress> progress;
      auto on_progress = [&](std::uint64_t done, std::uint64_t total) {
        if (!progress) progress.emplace("fsck: reading blocks", total, Progress::Unit::kItems);
        progress->Update(done);
      };
      // The client logs every authentication failure; phase 3 reports each
      // one itself, with its file and offset, so the log would only repeat it.
      const auto log_level = spdlog::get_level();
      spdlog::set_level(spdlog::level::critical);
      fs::FsckBlockResult r3 = fs::CheckBlocks(*client, *snap, options, on_progress, &g_cancel);
      spdlog::set_level(log_level);
      if (progress) progress->Finish();
      blocks_read = r3.blocks_read;
      if (r3.cancelled) {
        Print("Phase 3: blocks (interrupted)", r3.problems, {}, false);
        return fail("cancelled after " + std::to_string(r3.blocks_read) + " blocks", kCancelled);
      }
      if (!r3.fatal.ok()) return fail(r3.fatal.ToString(), kOperational);
      // A block may fail authentication only because another slot of its
      // path is inconsistent across the servers (a retrieval combines them
      // all): zeroing it would throw away data that a server's rebuild
      // recovers. Zero only what fails while every sharing is consistent.
      if (repair && !r3.repairs.empty()) {
        std::optional<Progress> scrub_progress;
        auto checked = ScrubAndCompare(
            client->params(), client->parity_rows(), client->participants(),
            [&](std::uint64_t first, std::uint32_t count, const wire::ParitySeed& seed) {
              return client->ParityAll(first, count, seed, std::chrono::minutes(10));
            },
            [&](std::uint64_t done, std::uint64_t total) {
              if (!scrub_progress) {
                scrub_progress.emplace("fsck: checking the servers' shares", total,
                                       Progress::Unit::kItems);
              }
              scrub_progress->Update(done);
            });
        if (scrub_progress) scrub_progress->Finish();
        std::string why;
        if (!checked.ok()) {
          why = "the servers' shares could not be checked: " + checked.status().ToString();
        } else {
          std::uint64_t bad = checked->inconsistent.damaged;
          for (const auto& sf : checked->servers) bad += sf.damaged;
          if (bad > 0) {
            why = std::to_string(bad) + " slots are damaged or inconsistent across the servers (" +
                  (checked->inconsistent.damaged > 0 ? DescribeDamage(checked->inconsistent)
                                                     : std::string("see s3oram scrub")) +
                  "), which alone makes reads through their buckets fail";
          }
        }
        if (!why.empty()) {
          r3.repairs.clear();
          for (auto& pr : r3.problems) {
            if (pr.repairable) {
              pr.repairable = false;
              pr.message += " (not zeroed: " + why + "; run s3oram scrub and repair the server "
                            "first)";
            }
          }
        }
      }
      if (repair && !r3.repairs.empty()) {
        if (Status s = fs::ApplyFsckRepairs(*unlocked, r3.repairs); !s.ok()) {
          return fail(s.ToString(), kOperational);
        }
      }
      p3problems = std::move(r3.problems);
    }
    Print("Phase 3: blocks (read through the ORAM: AEAD tag and version)", p3problems, p3notes,
          repair);
    Count(tally, p3problems, repair);
  }

  // Reading blocks moved them, and repairs changed the metadata: upload the
  // state as a clean unmount does, so another device refreshing later finds
  // a backup as new as the servers (and this state records that it has one).
  if (client) {
    auto b = BackupState(*client);
    Status recorded = b.ok() ? client->RecordBackup(b->generation, b->epoch) : b.status();
    if (recorded.ok()) {
      std::printf("client state backed up to the servers as generation %llu\n",
                  static_cast<unsigned long long>(b->generation));
    } else {
      std::printf("warning: backing up the client state failed: %s; run s3oram backup-state -s "
                  "%s\n",
                  recorded.ToString().c_str(), a.state.c_str());
    }
  }

  const std::uint64_t uncorrected = tally.errors - tally.corrected;
  std::printf(
      "%s: %llu error(s), %llu corrected, %llu left uncorrected; %zu inodes, %zu entries, "
      "%zu mapped blocks, %zu positions; %llu block(s) read%s\n",
      a.state.c_str(), static_cast<unsigned long long>(tally.errors),
      static_cast<unsigned long long>(tally.corrected),
      static_cast<unsigned long long>(uncorrected), snap->inodes.size(), snap->dirents.size(),
      snap->blocks.size(), snap->positions.size(), static_cast<unsigned long long>(blocks_read),
      a.no_blocks ? " (--no-blocks)" : "");
  if (!repair && uncorrected > 0 && repairable > 0) {
    std::printf("run s3oram fsck -y to repair what can be repaired\n");
  }
  return (tally.corrected > 0 ? kCorrected : 0) | (uncorrected > 0 ? kUncorrected : 0);
}

}  // namespace

void RegisterFsck(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("fsck", "check the client state and every block; repair with -y");
  auto a = std::make_shared<Args>();
  cmd->add_option("-s,--state", a->state, "client state file")->required();
  AddPassfileOption(cmd, a->passfile);
  auto* n = cmd->add_flag("-n,--dry-run", a->dry_run, "report only: change nothing, ask nothing");
  auto* y = cmd->add_flag("-y,--yes", a->yes, "repair every repairable problem without asking");
  n->excludes(y);
  cmd->add_flag("--no-blocks", a->no_blocks,
                "skip reading blocks through the ORAM (phases 1 and 2 only)");
  cmd->add_flag("--zero-damaged", a->zero_damaged,
                "with -y, let blocks whose data are lost (damaged, or without a position) read as "
                "zeros instead of leaving them reported");
  cmd->callback([a, exit_code] {
    struct sigaction sa{};
    sa.sa_handler = OnInterrupt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a blocking wait returns and the flag is seen
    ::sigaction(SIGINT, &sa, nullptr);
    *exit_code = Run(*a);
  });
}

}  // namespace s3oram::cli

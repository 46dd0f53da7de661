// s3oram scrub: every server checks every slot of its share file against the
// digest stored with it, so that a damaged disk is found and named before a
// read needs the damaged data; and the servers' sharings are checked against
// each other (oramcore/protocol/scrub.h ScrubAndCompare).
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/key_options.h"
#include "cli/progress.h"
#include "fused/client_config.h"
#include "oramcore/crypto/passphrase.h"
#include "oramcore/protocol/client.h"
#include "oramcore/protocol/scrub.h"

namespace s3oram::cli {

namespace {

struct ScrubArgs {
  std::string state;
  std::string config;
  std::string passfile;
  int timeout_ms = 600000;
  bool plain = false;
};

// Prints the error and returns the exit code to end with.
int FailScrub(const Status& s, int code) {
  std::fprintf(stderr, "s3oram scrub: %s\n", s.ToString().c_str());
  return code;
}

// One line per server's own digest check. Returns the problem text a mount
// would record for the damaged ones (for s3oram status) and counts them.
std::string ReportDamagedServers(const ConsistencyFindings& findings, const std::string& state,
                                 int* damaged_servers, std::size_t* last_damaged) {
  std::string problem;
  for (std::size_t i = 0; i < findings.servers.size(); ++i) {
    const ScrubFindings& f = findings.servers[i];
    if (f.buckets == 0 && f.damaged == 0) {
      std::printf(
          "server %zu: EXCLUDED, not checked (its shares are stale; s3oram rebuild -s %s "
          "--server %zu brings it back)\n",
          i, state.c_str(), i);
      continue;
    }
    if (f.damaged == 0) {
      std::printf("server %zu: %llu buckets, every slot verifies\n", i,
                  static_cast<unsigned long long>(f.buckets));
      continue;
    }
    ++*damaged_servers;
    *last_damaged = i;
    problem += (problem.empty() ? "" : "; ") + ("server " + std::to_string(i)) +
               " has damaged storage: " + std::to_string(f.damaged) +
               " slots do not match their digests (" + DescribeDamage(f) +
               "), found by s3oram scrub; repair it from the others: s3oram rebuild --server " +
               std::to_string(i);
    std::printf(
        "server %zu: DAMAGED: %llu slots do not match their digests (%s); repair it "
        "from the others: s3oram rebuild -s %s --server %zu\n",
        i, static_cast<unsigned long long>(f.damaged), DescribeDamage(f).c_str(), state.c_str(), i);
  }
  return problem;
}

// Which of the inconsistent slots listed hold a block the filesystem uses.
// Either way every retrieval through such a bucket fails (a retrieval answer
// combines every slot of the path with a share of zero or one, which only
// cancels for consistent sharings), and evictions through it are refused
// before they commit.
std::size_t CountLiveSlots(const PositionMap& pm, const ScrubFindings& bad) {
  std::size_t live = 0;
  for (const auto& d : bad.listed) {
    // The root snapshot is the pending eviction's input: what it holds
    // is moved down by that eviction, so count it as live.
    if (d.bucket == wire::kRootSnapshotBucket) {
      ++live;
      continue;
    }
    const auto ids = pm.BucketSlots(d.bucket);
    live += d.slot < ids.size() && ids[d.slot] != kNoBlock;
  }
  return live;
}

// Which server: the one whose share is left out when the other two open to
// a value carrying the share MAC (OddShareOut). Fails only if asking fails.
Status NameWrongServer(OramClient& client, const ConsistencyFindings& findings,
                       const ScrubArgs& a) {
  const ScrubFindings& bad = findings.inconsistent;
  std::vector<std::size_t> named(findings.servers.size(), 0);
  std::size_t unattributed = 0;
  for (const auto& d : bad.listed) {
    auto odd = client.OddServerOf(d.bucket, d.slot, std::chrono::milliseconds(a.timeout_ms));
    if (!odd.ok()) return odd.status().WithContext("naming the wrong server");
    if (*odd) {
      ++named[**odd];
    } else {
      ++unattributed;
    }
  }
  std::size_t culprits = 0, culprit = 0;
  for (std::size_t i = 0; i < named.size(); ++i) {
    if (named[i] > 0) {
      ++culprits;
      culprit = i;
    }
  }
  if (culprits == 1 && unattributed == 0) {
    std::printf(
        "servers: server %zu holds the odd share of all %zu slots checked (the other "
        "two agree on values that carry the share MAC); repair it: s3oram rebuild -s "
        "%s --server %zu --force\n",
        culprit, bad.listed.size(), a.state.c_str(), culprit);
  } else if (client.params().mac_elems == 0) {
    std::printf(
        "servers: which server is wrong cannot be told: this filesystem was made "
        "before share MACs; a live block survives only the rebuild of the wrong "
        "server\n");
  } else {
    std::printf("servers: the wrong server cannot be named:");
    for (std::size_t i = 0; i < named.size(); ++i) {
      if (named[i] > 0) std::printf(" server %zu holds the odd share of %zu slots;", i, named[i]);
    }
    std::printf(" %zu slots have no two servers agreeing on an authentic value\n", unattributed);
  }
  return Status::Ok();
}

// The cross-server comparison's verdict. Fails only if naming the wrong
// server fails.
Status ReportConsistency(OramClient& client, const ConsistencyFindings& findings,
                         const ScrubArgs& a) {
  const ScrubFindings& bad = findings.inconsistent;
  if (bad.damaged == 0) {
    std::printf(
        "servers: every slot that verifies is one consistent sharing across all %zu "
        "servers%s\n",
        client.participants().size(),
        findings.root_snapshot_checked ? " (the tree and the root snapshot of the pending eviction)"
                                       : "");
    return Status::Ok();
  }
  const std::size_t live = CountLiveSlots(client.position_map(), bad);
  std::printf(
      "servers: INCONSISTENT: %llu slots are not one sharing across the servers although "
      "every server's digests verify (%s; %zu of the first %zu hold a live block): a "
      "server's memory or an eviction produced wrong shares, or a server lies. Reads "
      "through these buckets fail and evictions through them are refused until the "
      "wrong server is rebuilt from the other two; a live block survives only the "
      "rebuild of the wrong one\n",
      static_cast<unsigned long long>(bad.damaged), DescribeDamage(bad).c_str(), live,
      bad.listed.size());
  return NameWrongServer(client, findings, a);
}

// With servers to spare, the one server whose storage scrub found damaged is
// excluded as suspect (ClientSession::Exclude), as a mount that met the
// damage would exclude it: the mounts then stay writable without it, and
// only a full rebuild takes it back. True if it was.
bool ExcludeDamagedServer(OramClient& client, std::size_t server, const std::string& problem,
                          const std::string& state) {
  if (!client.session().CanExclude(server)) return false;
  if (Status st = client.session().Exclude(server, "it reported damaged storage: " + problem,
                                           /*suspect=*/true);
      !st.ok()) {
    std::fprintf(stderr,
                 "s3oram scrub: server %zu cannot be excluded yet (%s); a mount excludes it when "
                 "it meets the damage\n",
                 server, st.ToString().c_str());
    return false;
  }
  std::printf(
      "server %zu: EXCLUDED now: the filesystem goes on, writable, with the other servers; "
      "rebuild it in full from them: s3oram rebuild -s %s --server %zu\n",
      server, state.c_str(), server);
  return true;
}

// A problem a mount met is kept (it says which access met it); one only
// scrub found is recorded so that s3oram status names it. Damaged storage
// replaces a note of a lesser problem (an inconsistency), so that the next
// mount is stopped before it meets the damage itself.
void RecordScrubProblem(OramClient& client, const std::string& problem, int damaged_servers) {
  const auto& note = client.problem_note();
  if (!problem.empty() && (!note || note->text.find("found by s3oram scrub") != std::string::npos ||
                           (damaged_servers > 0 && !note->damaged))) {
    if (Status c = client.RecordProblemNote(problem, damaged_servers > 0); !c.ok()) {
      std::fprintf(stderr,
                   "s3oram scrub: s3oram status cannot show this yet (%s); a mount records it "
                   "when it meets the damage\n",
                   c.ToString().c_str());
    }
  }
}

// Every slot verified and agrees (exit code 0): a problem a mount recorded
// earlier (s3oram status) has been repaired. Damaged storage is repaired
// when every server verifies; an inconsistency a mount met is not while an
// eviction is still pending: the note may record its refusal, which only its
// commit ends (the next mount retries it, and the commit clears a note of
// its refusal).
void ClearRepairedProblem(OramClient& client, int exit_code) {
  const auto& recorded = client.problem_note();
  auto pending = client.PendingEviction();
  const bool wait_for_commit =
      recorded && !recorded->damaged && (!pending.ok() || pending->has_value());
  if (exit_code == 0 && wait_for_commit && pending.ok()) {
    std::printf(
        "the problem recorded earlier stays until eviction %llu, still pending, "
        "commits: the next mount retries it\n",
        static_cast<unsigned long long>(**pending));
  } else if (exit_code == 0 && wait_for_commit) {
    std::fprintf(stderr, "s3oram scrub: the problem recorded earlier stays (%s)\n",
                 pending.status().ToString().c_str());
  } else if (exit_code == 0 && recorded) {
    if (Status c = client.ClearProblemNote(); c.ok()) {
      std::printf("the problem recorded earlier is repaired: %s\n", "every server verifies again");
    } else {
      std::fprintf(stderr, "s3oram scrub: clearing the recorded problem: %s\n",
                   c.ToString().c_str());
    }
  }
}

// The exit code: 0 clean, 4 damage or an inconsistency found, 1 when the
// scrub cannot run, 2 for a usage or passphrase error.
int RunScrub(ScrubArgs& a) {
  if (!a.config.empty()) {
    auto cfg = fs::LoadClientConfig(a.config);
    if (!cfg.ok()) return FailScrub(cfg.status(), 2);
    a.state = cfg->state;
    if (a.passfile.empty()) a.passfile = cfg->passfile;
  }
  if (a.state.empty()) return FailScrub(Status::InvalidArgument("give --state or --config"), 2);
  PassphraseSource source{a.passfile, kPassphraseEnv, ::isatty(STDIN_FILENO) == 1};
  auto pass = ReadPassphrase(source, "Passphrase for " + a.state + ": ");
  if (!pass.ok()) return FailScrub(pass.status(), 2);
  ClientOptions options;
  options.requests.deadline = std::chrono::milliseconds(a.timeout_ms);
  options.requests.resend_after = std::chrono::milliseconds(a.timeout_ms);
  // Scrubbing needs no lease and changes nothing: it runs beside a mount.
  auto client = OramClient::OpenReadOnly(a.state, *pass, options);
  if (!client.ok()) return FailScrub(client.status(), 1);
  const OramParams& p = (*client)->params();
  std::unique_ptr<Progress> bar;
  auto findings = ScrubAndCompare(
      p, (*client)->parity_rows(), (*client)->participants(),
      [&](std::uint64_t first, std::uint32_t count, const wire::ParitySeed& seed) {
        return (*client)->ParityAll(first, count, seed, std::chrono::milliseconds(a.timeout_ms));
      },
      [&](std::uint64_t done, std::uint64_t total) {
        if (!bar) {
          bar = std::make_unique<Progress>("scrub", total, Progress::Unit::kItems, stderr, a.plain);
        }
        bar->Update(done);
      });
  if (bar) bar->Finish();
  if (!findings.ok()) return FailScrub(findings.status(), 1);
  int damaged_servers = 0;
  std::size_t damaged_server = 0;
  // For s3oram status, as a mount would record it.
  std::string problem = ReportDamagedServers(*findings, a.state, &damaged_servers, &damaged_server);
  if (Status s = ReportConsistency(**client, *findings, a); !s.ok()) return FailScrub(s, 1);
  const ScrubFindings& bad = findings->inconsistent;
  const int exit_code = damaged_servers > 0 || bad.damaged > 0 ? 4 : 0;
  if (damaged_servers == 1 && bad.damaged == 0 &&
      ExcludeDamagedServer(**client, damaged_server, problem, a.state)) {
    problem.clear();  // the exclusion names it; the mounts stay writable
  }
  if (bad.damaged > 0) {
    problem += (problem.empty() ? "" : "; ") + std::to_string(bad.damaged) +
               " slots are not one consistent sharing across the servers (" + DescribeDamage(bad) +
               "), found by s3oram scrub";
  }
  RecordScrubProblem(**client, problem, damaged_servers);
  ClearRepairedProblem(**client, exit_code);
  return exit_code;
}

}  // namespace

void RegisterScrub(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "scrub", "have every server verify every stored slot against its digest (exit 4: damage)");
  auto a = std::make_shared<ScrubArgs>();
  auto* state_opt = cmd->add_option("-s,--state", a->state, "client state file");
  auto* config_opt = cmd->add_option(
      "--config", a->config,
      "take the state file and passfile from this mount configuration (man 5 s3oramfs.toml; "
      "what the s3oram-scrub@NAME timer uses)");
  state_opt->excludes(config_opt);
  cmd->add_option("--timeout-ms", a->timeout_ms,
                  "per request (one request reads up to 256 MiB of a server's share file)")
      ->capture_default_str();
  AddPassfileOption(cmd, a->passfile);
  cmd->add_flag("--plain-progress", a->plain, "progress as plain lines even on a terminal");
  cmd->callback([a, exit_code] { *exit_code = RunScrub(*a); });
}

}  // namespace s3oram::cli

// s3oram status: reachability and progress of every server of a filesystem.
#include <unistd.h>

#include <cstdio>
#include <ctime>

#include "cli/commands.h"
#include "cli/key_options.h"
#include "oramcore/crypto/passphrase.h"
#include "oramcore/protocol/client.h"
#include "oramcore/protocol/counter_agreement.h"
#include "oramcore/state/state_file.h"

namespace s3oram::cli {

namespace {

// Without the passphrase only the state's clear header can be read: the
// servers, counters and positions are inside the sealed database.
void PrintSealedHeader(const std::string& state, const std::vector<StateHeader>& headers) {
  const StateHeader& h = headers.front();
  std::string id;
  for (std::uint8_t b : h.fs_id) {
    static const char* hex = "0123456789abcdef";
    id += hex[b >> 4];
    id += hex[b & 15];
  }
  std::printf("filesystem  %s\n", state.c_str());
  std::printf("fs id       %s\n", id.c_str());
  std::printf(
      "state       sealed (format %u), key epoch %llu (passphrase or key changes)%s; "
      "Argon2id %llu passes, %s\n",
      h.format, static_cast<unsigned long long>(h.generation),
      headers.size() > 1 ? " (a change was cut short)" : "",
      static_cast<unsigned long long>(h.wrap.kdf.ops),
      HumanBytes(double(h.wrap.kdf.mem_bytes)).c_str());
  std::printf(
      "the servers, counters and backups need the passphrase (--passfile, $%s "
      "or a terminal)\n",
      kPassphraseEnv);
}

// Exactly the checks OramClient::CheckEvictionMac runs now.
const char* EvictionMacCheckText(OramClient::EvictionMacCheck check, std::uint32_t mac_elems) {
  const char* mac_check = "";
  switch (check) {
    case OramClient::EvictionMacCheck::kWhole:
      mac_check = " and by share MAC";
      break;
    case OramClient::EvictionMacCheck::kOneHalf:
      mac_check =
          " and by half of the share MAC while the rekey is under way (its buckets "
          "mix slots tagged under two keys that share that half: a wrong value passes "
          "with probability 2^-60 instead of 2^-120)";
      break;
    case OramClient::EvictionMacCheck::kNone:
      mac_check = mac_elems == 0
                      ? " only (made before share MACs: a lying server can destroy what an "
                        "eviction moves; docs/SECURITY.md)"
                      : " only while the rekey is under way (it was begun by an s3oram "
                        "without share MAC halves, so its two keys share no tag: until it "
                        "ends a lying server can destroy what an eviction moves; "
                        "docs/SECURITY.md)";
      break;
  }
  return mac_check;
}

// What the local state alone says: capacity used, eviction checks, counters.
void PrintClientSummary(const std::string& state, const OramClient& client) {
  const auto& c = client.counters();
  const auto& p = client.params();
  const auto& pm = client.position_map();
  std::printf("filesystem  %s\n", state.c_str());
  std::printf("blocks      %llu of %llu used (%s of %s)\n",
              static_cast<unsigned long long>(pm.live_blocks()),
              static_cast<unsigned long long>(p.capacity_blocks),
              HumanBytes(double(pm.live_blocks()) * p.block_bytes).c_str(),
              HumanBytes(double(p.capacity_blocks) * p.block_bytes).c_str());
  std::printf("evictions   checked for consistency%s\n",
              EvictionMacCheckText(client.eviction_mac_check(), p.mac_elems));
  std::printf("client      epoch %llu, seq %llu, evictions %llu, accesses since eviction %llu/%u\n",
              static_cast<unsigned long long>(c.epoch), static_cast<unsigned long long>(c.seq),
              static_cast<unsigned long long>(c.ne), static_cast<unsigned long long>(c.nr),
              p.evict_rate);
}

// One line per server (two while it evicts); returns how many are unreachable.
int PrintServers(const std::vector<ServerReport>& reports) {
  int unreachable = 0;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& r = reports[i];
    if (!r.status.ok()) {
      std::printf("server %zu    %s  UNREACHABLE: %s\n", i, r.endpoint.c_str(),
                  r.status.ToString().c_str());
      ++unreachable;
      continue;
    }
    std::printf(
        "server %zu    %s  up, answered in %.1f ms, epoch %llu, applied seq %llu, evictions "
        "%llu%s, share %s (%s allocated)\n",
        i, r.endpoint.c_str(), static_cast<double>(r.answered_in.count()) / 1000,
        static_cast<unsigned long long>(r.reply.epoch),
        static_cast<unsigned long long>(r.reply.applied_seq),
        static_cast<unsigned long long>(r.reply.applied_evictions),
        r.reply.prepared_eviction ? " (one prepared)" : "",
        HumanBytes(double(r.reply.share_file_bytes)).c_str(),
        HumanBytes(double(r.reply.allocated_bytes)).c_str());
    if (r.reply.evicting) {
      std::printf(
          "            evicting: eviction %llu (attempt %u), round %u/%u, %s, about %u%% "
          "after %.0f s; accesses wait until it commits\n",
          static_cast<unsigned long long>(r.reply.evicting_eviction), r.reply.evicting_attempt,
          r.reply.evicting_round, r.reply.evicting_rounds,
          wire::EvictPhaseName(r.reply.evicting_phase), r.reply.evicting_permille / 10,
          static_cast<double>(r.reply.evicting_elapsed_ms) / 1000);
    }
  }
  return unreachable;
}

// The state's own verdicts: freshness, a recorded problem, a rekey under
// way, the last backup.
void PrintStateNotes(const std::string& state, const OramClient& client) {
  const auto& c = client.counters();
  // The rule OramClient::Open applies (kStaleState, freshness.h), said
  // before a mount trips over it.
  const FreshnessVerdict& fresh = client.freshness();
  if (!fresh.inconsistent.empty()) {
    std::printf("state       SERVER INCONSISTENT: %s (`s3oram scrub -s %s` checks the shares)\n",
                fresh.inconsistent.c_str(), state.c_str());
  }
  if (fresh.stale) {
    std::printf(
        "state       STALE: another device has used the filesystem since this state "
        "was last used (%s); fetch the newer state with `s3oram refresh-state -s %s` "
        "or mount with -o refresh_state\n",
        fresh.why.c_str(), state.c_str());
  }
  for (const auto& w : fresh.warnings) std::printf("state       warning: %s\n", w.c_str());
  if (const auto& note = client.problem_note()) {
    char when[32] = "?";
    const std::time_t t = static_cast<std::time_t>(note->unix_seconds);
    std::tm tm{};
    if (::gmtime_r(&t, &tm) != nullptr) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    std::printf(
        "problem     %s (last met %s; cleared by a clean `s3oram scrub` or the rebuild "
        "it names)\n",
        note->text.c_str(), when);
    if (note->damaged) {
      std::printf(
          "writes      STOPPED: a server reported damaged storage, so a mount of this "
          "state is read-only (changes fail with EROFS) and runs no eviction until "
          "that server is repaired (the rebuild the problem line names, or a clean "
          "scrub)\n");
    }
  }
  if (const auto& r = client.rekey()) {
    const bool reseal = r->phase == RekeyProgress::Phase::kReseal;
    std::printf(
        "rekey       UNDER WAY (%s %llu of %llu): blocks not re-sealed yet are still "
        "sealed under the previous master key; finish it with `s3oram rekey -s %s`\n",
        reseal ? "re-sealing, at block" : "purging, at eviction",
        static_cast<unsigned long long>(reseal ? r->next_block : c.ne),
        static_cast<unsigned long long>(reseal ? client.params().capacity_blocks : r->purge_until),
        state.c_str());
  }
  if (const auto& mark = client.backup_mark()) {
    std::printf("state       last uploaded as backup generation %llu%s\n",
                static_cast<unsigned long long>(mark->generation),
                mark->epoch == c.epoch ? ""
                                       : "; changed since (its last session ended without "
                                         "an upload)");
  }
}

// Counters the next mount or backup adopts, as it will
// (oramcore/protocol/counter_agreement.h): a server whose value t + 1
// others do not come near is named here, before a mount refuses.
struct CounterReports {
  const std::vector<ServerReport>& reports;
  std::size_t threshold;
  std::vector<std::size_t> asked;  // the servers that answered, in order
  std::vector<std::uint64_t> values;

  void Add(std::size_t server, std::uint64_t value) {
    asked.push_back(server);
    values.push_back(value);
  }
  void PrintOutliers(std::uint64_t floor, const char* what) const {
    if (asked.size() != reports.size()) return;  // judged only with every server's answer
    auto name = [&](std::size_t x) {
      return "server " + std::to_string(asked[x]) + " (" + reports[asked[x]].endpoint + ")";
    };
    const Status st =
        CounterOutlierError(AdoptCounter(values, floor, threshold), values, threshold, what, name);
    if (!st.ok()) std::printf("state       SERVER INCONSISTENT: %s\n", st.message().c_str());
  }
};

// The single-writer lease (the holder's description is sealed: only the
// epoch and the times are shown without the passphrase).
void PrintLeases(const OramClient& client, const std::vector<ServerReport>& reports,
                 const std::vector<Result<wire::LeaseReply>>& leases) {
  CounterReports epochs{reports, client.params().threshold, {}, {}};
  for (std::size_t i = 0; i < reports.size(); ++i) {
    if (!reports[i].status.ok()) continue;  // already reported unreachable
    if (!leases[i].ok()) {
      std::printf("lease %zu     cannot query: %s\n", i, leases[i].status().ToString().c_str());
      continue;
    }
    const wire::LeaseReply* lease = &leases[i].value();
    epochs.Add(i, std::max(reports[i].reply.epoch, lease->highest_epoch));
    if (lease->holder_epoch == 0) {
      std::printf("lease %zu     free (not mounted)\n", i);
    } else {
      std::printf("lease %zu     held by epoch %llu for %llu s, last active %llu s ago\n", i,
                  static_cast<unsigned long long>(lease->holder_epoch),
                  static_cast<unsigned long long>(lease->held_ms / 1000),
                  static_cast<unsigned long long>(lease->idle_ms / 1000));
    }
  }
  epochs.PrintOutliers(client.counters().epoch, "epoch");
}

// Client-state backups (s3oram backup-state, and every clean unmount).
void PrintBackups(const OramClient& client, const std::vector<ServerReport>& reports,
                  const std::vector<Result<std::vector<wire::BackupInfo>>>& backups) {
  CounterReports generations{reports, client.params().threshold, {}, {}};
  for (std::size_t i = 0; i < reports.size(); ++i) {
    if (!reports[i].status.ok()) continue;  // already reported unreachable
    if (!backups[i].ok()) {
      std::printf("backup %zu    cannot list: %s\n", i, backups[i].status().ToString().c_str());
      continue;
    }
    const auto& list = backups[i].value();
    generations.Add(i, list.empty() ? 0 : list.back().generation);
    if (list.empty()) {
      std::printf("backup %zu    none\n", i);
      continue;
    }
    std::string gens;
    for (const auto& b : list) gens += (gens.empty() ? "" : ", ") + std::to_string(b.generation);
    std::printf("backup %zu    newest generation %llu (%s share, key epoch %llu); held: %s\n", i,
                static_cast<unsigned long long>(list.back().generation),
                HumanBytes(double(list.back().elems) * sizeof(field::Elem)).c_str(),
                static_cast<unsigned long long>(list.back().key_epoch), gens.c_str());
  }
  const auto& mark = client.backup_mark();
  generations.PrintOutliers(mark ? mark->generation : 0, "backup generation");
}

// The exit code: 0, or 1 when the state cannot be opened or a server is
// unreachable, 2 when the passphrase cannot be read.
int RunStatus(const std::string& state, int timeout_ms, const std::string& passfile) {
  auto headers = ReadStateHeader(state);
  if (!headers.ok()) {
    std::fprintf(stderr, "s3oram status: %s\n", headers.status().ToString().c_str());
    return 1;
  }
  PassphraseSource source{passfile, kPassphraseEnv, ::isatty(STDIN_FILENO) == 1};
  auto pass = ReadPassphrase(source, "Passphrase for " + state + ": ");
  if (!pass.ok() && pass.status().code() == Status::Code::kFailedPrecondition) {
    PrintSealedHeader(state, *headers);
    return 0;
  }
  if (!pass.ok()) {
    std::fprintf(stderr, "s3oram status: %s\n", pass.status().ToString().c_str());
    return 2;
  }
  ClientOptions options;
  options.requests.deadline = std::chrono::milliseconds(timeout_ms);
  options.requests.resend_after = std::chrono::milliseconds(timeout_ms);
  options.allow_stale = true;        // shown below, not refused
  options.allow_unreachable = true;  // named below, the others shown
  auto client = OramClient::OpenReadOnly(state, *pass, options);
  if (!client.ok()) {
    std::fprintf(stderr, "s3oram status: %s\n", client.status().ToString().c_str());
    return 1;
  }
  PrintClientSummary(state, **client);
  // What the open asked: one round, every server at once and each on its
  // own, so a slow or down server costs the command its own timeout once.
  // A server preparing an eviction answers it (its dispatch table serves
  // STATUS, BACKUP_LIST and LEASE_QUERY beside the PREPARE).
  const OramClient::OpeningViews& views = (*client)->opened_with();
  const int unreachable = PrintServers(views.reports);
  PrintStateNotes(state, **client);
  PrintLeases(**client, views.reports, views.leases);
  PrintBackups(**client, views.reports, views.backups);
  return unreachable ? 1 : 0;
}

}  // namespace

void RegisterStatus(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("status", "servers reachable, epoch, applied seq, capacity used");
  auto state = std::make_shared<std::string>();
  auto timeout_ms = std::make_shared<int>(5000);
  auto passfile = std::make_shared<std::string>();
  cmd->add_option("-s,--state", *state, "client state file")->required();
  cmd->add_option("--timeout-ms", *timeout_ms, "per-server timeout")->capture_default_str();
  AddPassfileOption(cmd, *passfile);
  cmd->callback([state, timeout_ms, passfile, exit_code] {
    *exit_code = RunStatus(*state, *timeout_ms, *passfile);
  });
}

}  // namespace s3oram::cli

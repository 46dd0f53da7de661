#include "fused/status_report.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <ctime>

#include "oramcore/base/human_bytes.h"
#include "oramcore/protocol/counter_agreement.h"

namespace s3oram::fs {

namespace {

__attribute__((format(printf, 2, 3))) void Appendf(std::string& out, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  if (n > 0) {
    const std::size_t at = out.size();
    out.resize(at + static_cast<std::size_t>(n) + 1);
    std::vsnprintf(out.data() + at, static_cast<std::size_t>(n) + 1, format, again);
    out.resize(at + static_cast<std::size_t>(n));
  }
  va_end(again);
}

// Exactly the checks OramClient::CheckEvictionMac runs now.
const char* EvictionMacCheckText(BlockCodec::CombinationCheck check, std::uint32_t mac_elems) {
  const char* mac_check = "";
  switch (check) {
    case BlockCodec::CombinationCheck::kWhole:
      mac_check = " and by share MAC";
      break;
    case BlockCodec::CombinationCheck::kOneHalf:
      mac_check =
          " and by half of the share MAC while the rekey is under way (its buckets "
          "mix slots tagged under two keys that share that half: a wrong value passes "
          "with probability 2^-60 instead of 2^-120)";
      break;
    case BlockCodec::CombinationCheck::kNone:
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
void PrintClientSummary(std::string& out, const OramClient::Snapshot& client) {
  const std::string& state = client.state_path;
  const auto& c = client.counters;
  const auto& p = client.params;
  Appendf(out, "filesystem  %s\n", state.c_str());
  Appendf(out, "blocks      %llu of %llu used (%s of %s)\n",
          static_cast<unsigned long long>(client.live_blocks),
          static_cast<unsigned long long>(p.capacity_blocks),
          HumanBytes(double(client.live_blocks) * p.block_bytes).c_str(),
          HumanBytes(double(p.capacity_blocks) * p.block_bytes).c_str());
  const std::string who =
      p.threshold == 1 ? std::string("no single server learns anything")
                       : "no " + std::to_string(p.threshold) + " of them together learn anything";
  Appendf(out,
          "sharing     %u servers, privacy threshold t = %u (%s; a retrieval needs %u answers)\n",
          p.parties, p.threshold, who.c_str(), 2 * p.threshold + 1);
  Appendf(out, "evictions   checked for consistency%s\n",
          EvictionMacCheckText(client.eviction_mac_check, p.mac_elems));
  Appendf(
      out, "client      epoch %llu, seq %llu, evictions %llu, accesses since eviction %llu/%u\n",
      static_cast<unsigned long long>(c.epoch), static_cast<unsigned long long>(c.seq),
      static_cast<unsigned long long>(c.ne), static_cast<unsigned long long>(c.nr), p.evict_rate);
}

// How far behind excluded server i is: the evictions the others applied
// since it stopped taking part, from what it answered now (it may have
// applied some before it was found down) or, silent, from the exclusion.
std::string Behind(const Exclusion& e, const ServerReport& r, std::uint64_t evictions) {
  if (r.status.ok() && r.reply.initialized && r.reply.applied_evictions <= evictions) {
    return "; it is " + std::to_string(evictions - r.reply.applied_evictions) +
           " evictions behind (it applied " + std::to_string(r.reply.applied_evictions) +
           ", the others " + std::to_string(evictions) + ")";
  }
  if (e.since_eviction <= evictions) {
    return "; the others applied " + std::to_string(evictions - e.since_eviction) +
           " evictions without it";
  }
  return "";
}

// One line per server (two while it evicts); returns how many are unreachable.
int PrintServers(std::string& out, const std::vector<ServerReport>& reports,
                 const OramClient::Snapshot& client) {
  const auto& down = client.down;
  const auto& wrong_answers = client.wrong_answers;
  const auto& exclusions = client.exclusions;
  const auto& lagged_answers = client.lagged_answers;
  int unreachable = 0;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& r = reports[i];
    if (client.catching_up && client.catching_up->server == i) {
      const auto& c = *client.catching_up;
      Appendf(out,
              "server %zu    %s  CATCHING UP: %s of the %s of buckets it missed sent in %.1f s; "
              "it takes part again once all are (the accesses wait meanwhile)\n",
              i, r.endpoint.c_str(), HumanBytes(double(c.done_bytes)).c_str(),
              HumanBytes(double(c.total_bytes)).c_str(),
              static_cast<double>(c.elapsed.count()) / 1000);
    }
    for (const Exclusion& e : exclusions) {
      if (e.server != i) continue;
      char when[32] = "?";
      const auto t = static_cast<std::time_t>(e.unix_seconds);
      std::tm tm{};
      if (gmtime_r(&t, &tm) != nullptr) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
      // A suspect (excluded for what it answered) is never caught up.
      const char* why = e.suspect ? " for what it answered" : "";
      const std::string then =
          e.suspect ? "The others go on without it, writable; nothing of it is read or trusted "
                      "again until `s3oram rebuild --server " +
                          std::to_string(i) + "` rebuilds it in full from the others"
                    : "The others go on without it and its shares fall behind; once it is back, "
                      "a mount catches it up (or `s3oram rebuild --server " +
                          std::to_string(i) + "`) and takes it back";
      const std::string behind = e.suspect ? "" : Behind(e, r, client.counters.ne);
      Appendf(out, "server %zu    %s  EXCLUDED since eviction %llu (%s)%s: %s%s. %s\n", i,
              r.endpoint.c_str(), static_cast<unsigned long long>(e.since_eviction), when, why,
              e.reason.c_str(), behind.c_str(), then.c_str());
    }
    if (i < down.size() && down[i]) {
      // The client's own verdict (its requests to it fail at once), beside
      // what this round of questions found.
      Appendf(out, "server %zu    %s  the client counts it down %s; its requests fail at once\n", i,
              r.endpoint.c_str(), DescribeDown(*down[i]).c_str());
    }
    if (i < wrong_answers.size() && wrong_answers[i] != 0) {
      // Only with four or more servers: the others outvoted it.
      Appendf(out,
              "server %zu    %s  WRONG ANSWERS: %llu of its retrieval answers were wrong and "
              "outvoted by the others since this client started; it lies or its storage is "
              "damaged (s3oram scrub, then s3oram rebuild --server %zu if it is named)\n",
              i, r.endpoint.c_str(), static_cast<unsigned long long>(wrong_answers[i]), i);
    }
    if (i < lagged_answers.size() && lagged_answers[i] != 0) {
      // Only with four or more servers: the others answered first.
      Appendf(out,
              "server %zu    %s  slow: %llu of its retrieval answers came after the first three "
              "since this client started (the accesses did not wait for them; each was checked "
              "when it came)\n",
              i, r.endpoint.c_str(), static_cast<unsigned long long>(lagged_answers[i]));
    }
    if (!r.status.ok()) {
      Appendf(out, "server %zu    %s  UNREACHABLE: %s\n", i, r.endpoint.c_str(),
              r.status.ToString().c_str());
      ++unreachable;
      continue;
    }
    Appendf(out,
            "server %zu    %s  up, answered in %.1f ms, epoch %llu, applied seq %llu, evictions "
            "%llu%s, share %s (%s allocated)%s\n",
            i, r.endpoint.c_str(), static_cast<double>(r.answered_in.count()) / 1000,
            static_cast<unsigned long long>(r.reply.epoch),
            static_cast<unsigned long long>(r.reply.applied_seq),
            static_cast<unsigned long long>(r.reply.applied_evictions),
            r.reply.prepared_eviction ? " (one prepared)" : "",
            HumanBytes(double(r.reply.share_file_bytes)).c_str(),
            HumanBytes(double(r.reply.allocated_bytes)).c_str(),
            r.reply.rebuilding ? "; being rebuilt or caught up: it serves no access until that "
                                 "finishes (a catch-up cut off is begun again from the evictions "
                                 "shown)"
                               : "");
    if (r.reply.evicting) {
      Appendf(out,
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
void PrintStateNotes(std::string& out, const OramClient::Snapshot& client, bool live_mount) {
  const std::string& state = client.state_path;
  const auto& c = client.counters;
  // The rule OramClient::Open applies (kStaleState, freshness.h), said
  // before a mount trips over it.
  const FreshnessVerdict& fresh = client.freshness;
  if (!fresh.inconsistent.empty()) {
    Appendf(out, "state       SERVER INCONSISTENT: %s (`s3oram scrub -s %s` checks the shares)\n",
            fresh.inconsistent.c_str(), state.c_str());
  }
  if (fresh.stale) {
    Appendf(out,
            "state       STALE: another device has used the filesystem since this state "
            "was last used (%s); fetch the newer state with `s3oram refresh-state -s %s` "
            "or mount with -o refresh_state\n",
            fresh.why.c_str(), state.c_str());
  }
  for (const auto& w : fresh.warnings) Appendf(out, "state       warning: %s\n", w.c_str());
  if (const auto& note = client.problem_note) {
    char when[32] = "?";
    const std::time_t t = static_cast<std::time_t>(note->unix_seconds);
    std::tm tm{};
    if (::gmtime_r(&t, &tm) != nullptr) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    Appendf(out,
            "problem     %s (last met %s; cleared by a clean `s3oram scrub` or the rebuild "
            "it names)\n",
            note->text.c_str(), when);
    if (note->damaged) {
      Appendf(out,
              "writes      STOPPED: a server reported damaged storage, so a mount of this "
              "state is read-only (changes fail with EROFS) and runs no eviction until "
              "that server is repaired (the rebuild the problem line names, or a clean "
              "scrub)\n");
    }
  }
  if (client.writes_stopped && !(client.problem_note && client.problem_note->damaged)) {
    Appendf(out, "writes      STOPPED: %s\n", client.writes_stopped->ToString().c_str());
  }
  if (client.fenced) {
    Appendf(out,
            "lease       FENCED: another client took the single-writer lease over; this "
            "client changes nothing more (unmount it; the other holds the filesystem now)\n");
  }
  if (const auto& r = client.rekey) {
    const bool reseal = r->phase == RekeyProgress::Phase::kReseal;
    Appendf(
        out,
        "rekey       UNDER WAY (%s %llu of %llu): blocks not re-sealed yet are still "
        "sealed under the previous master key; finish it with `s3oram rekey -s %s`\n",
        reseal ? "re-sealing, at block" : "purging, at eviction",
        static_cast<unsigned long long>(reseal ? r->next_block : c.ne),
        static_cast<unsigned long long>(reseal ? client.params.capacity_blocks : r->purge_until),
        state.c_str());
  }
  if (const auto& mark = client.backup_mark) {
    Appendf(out, "state       last uploaded as backup generation %llu%s\n",
            static_cast<unsigned long long>(mark->generation),
            mark->epoch == c.epoch ? ""
            : live_mount           ? "; changed by this mount since (it uploads the state at "
                                     "its unmount)"
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
  void PrintOutliers(std::string& out, std::uint64_t floor, const char* what) const {
    if (asked.size() != reports.size()) return;  // judged only with every server's answer
    auto name = [&](std::size_t x) {
      return "server " + std::to_string(asked[x]) + " (" + reports[asked[x]].endpoint + ")";
    };
    const Status st =
        CounterOutlierError(AdoptCounter(values, floor, threshold), values, threshold, what, name);
    if (!st.ok()) Appendf(out, "state       SERVER INCONSISTENT: %s\n", st.message().c_str());
  }
};

// The single-writer lease (the holder's description is sealed: only the
// epoch and the times are shown without the passphrase).
void PrintLeases(std::string& out, const OramClient::Snapshot& client,
                 const std::vector<ServerReport>& reports,
                 const std::vector<Result<wire::LeaseReply>>& leases) {
  CounterReports epochs{reports, client.params.threshold, {}, {}};
  for (std::size_t i = 0; i < reports.size(); ++i) {
    if (!reports[i].status.ok()) continue;  // already reported unreachable
    if (!leases[i].ok()) {
      Appendf(out, "lease %zu     cannot query: %s\n", i, leases[i].status().ToString().c_str());
      continue;
    }
    const wire::LeaseReply* lease = &leases[i].value();
    epochs.Add(i, std::max(reports[i].reply.epoch, lease->highest_epoch));
    if (lease->holder_epoch == 0) {
      Appendf(out, "lease %zu     free (not mounted)\n", i);
    } else {
      Appendf(out, "lease %zu     held by epoch %llu for %llu s, last active %llu s ago\n", i,
              static_cast<unsigned long long>(lease->holder_epoch),
              static_cast<unsigned long long>(lease->held_ms / 1000),
              static_cast<unsigned long long>(lease->idle_ms / 1000));
    }
  }
  epochs.PrintOutliers(out, client.counters.epoch, "epoch");
}

// Client-state backups (s3oram backup-state, and every clean unmount).
void PrintBackups(std::string& out, const OramClient::Snapshot& client,
                  const std::vector<ServerReport>& reports,
                  const std::vector<Result<std::vector<wire::BackupInfo>>>& backups) {
  CounterReports generations{reports, client.params.threshold, {}, {}};
  for (std::size_t i = 0; i < reports.size(); ++i) {
    if (!reports[i].status.ok()) continue;  // already reported unreachable
    if (!backups[i].ok()) {
      Appendf(out, "backup %zu    cannot list: %s\n", i, backups[i].status().ToString().c_str());
      continue;
    }
    const auto& list = backups[i].value();
    generations.Add(i, list.empty() ? 0 : list.back().generation);
    if (list.empty()) {
      Appendf(out, "backup %zu    none\n", i);
      continue;
    }
    std::string gens;
    for (const auto& b : list) gens += (gens.empty() ? "" : ", ") + std::to_string(b.generation);
    Appendf(out, "backup %zu    newest generation %llu (%s share, key epoch %llu); held: %s\n", i,
            static_cast<unsigned long long>(list.back().generation),
            HumanBytes(double(list.back().elems) * sizeof(field::Elem)).c_str(),
            static_cast<unsigned long long>(list.back().key_epoch), gens.c_str());
  }
  const auto& mark = client.backup_mark;
  generations.PrintOutliers(out, mark ? mark->generation : 0, "backup generation");
}

}  // namespace

StatusReport RenderStatus(const OramClient::Snapshot& client, const ServerViews& servers,
                          bool live_mount) {
  StatusReport report;
  std::string& out = report.text;
  PrintClientSummary(out, client);
  report.unreachable = PrintServers(out, servers.reports, client);
  PrintStateNotes(out, client, live_mount);
  PrintLeases(out, client, servers.reports, servers.leases);
  PrintBackups(out, client, servers.reports, servers.backups);
  return report;
}

}  // namespace s3oram::fs

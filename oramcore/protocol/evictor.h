// Evictor: the client's evictions (the paper's Subroutine 3 as the triplet
// eviction; docs/ARCHITECTURE.md §5 and §8), the state they carry between
// accesses, and the recovery of one left under way.
//
// The eviction of round r starts at the end of that round (RunEviction: the
// plan is logged with the blocks' new positions, the map moves them, and
// PREPARE goes to every server) and commits at the end of round r + 1, so
// the servers' minutes of work overlap the next round's accesses (client.h,
// class comment). Meanwhile the Evictor holds it as in flight: its record
// (plan, positions before it), whether every server started it, and the
// pace the round's accesses keep beside it (EvictionPacer, fed by the
// servers' progress). An access that needs its result early commits it
// (FinishInFlight); one the state logged as pending is finished at Open
// (FinishPending: COMMIT where some server already committed, else PREPARE
// again under a new attempt, logged first).
//
// Guarantees: every attempt's PREPARE carries fresh shares, and its number
// is durable before any server sees it; nothing commits before EVICT_CHECK
// found the prepared buckets consistent on every server (and, with share
// MACs, authentic); the state records the commit durably, with the new
// counters, before anything else is sent. A server that reported damaged
// storage (or an eviction inconsistent on every attempt) is not asked again
// for kDamagedRetry: the refusal is returned at once. Not thread-safe (the
// client serialises).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/field.h"
#include "oramcore/protocol/client_session.h"
#include "oramcore/protocol/client_stats.h"
#include "oramcore/protocol/eviction_pacer.h"
#include "oramcore/protocol/eviction_record.h"
#include "oramcore/protocol/root_write_queue.h"
#include "oramcore/tree/planner.h"
#include "oramcore/tree/position_map.h"
#include "oramcore/wire/server_set.h"

namespace s3oram {

class Evictor {
 public:
  // All referenced objects outlive the Evictor. The pacer starts from the
  // state's estimate. `roots`: its writes some server lags on are settled
  // before an eviction starts (the eviction reads the whole root on every
  // server).
  Evictor(ClientSession& session, PositionMap& pm, ClientStats& stats, RootWriteQueue& roots);

  // The eviction in flight (plan, positions before it), if any.
  const EvictionRecord* in_flight() const { return inflight_ ? &inflight_->record : nullptr; }
  // The round whose root the accesses write now (the eviction of that
  // number moves it out): ne, or ne + 1 while an eviction is in flight.
  std::uint64_t current_round() const { return session_.counters().ne + (inflight_ ? 1 : 0); }
  // Whether every server started it (copied the last round's root aside).
  bool started() const { return inflight_ && inflight_->started; }
  // An access took block `id` out of the eviction in flight: the copy the
  // eviction puts in the tree is stale, its slot free.
  void TakenOut(BlockId id) {
    if (inflight_) inflight_->record.before.erase(id);
  }

  // The end of a round (nr == A): the eviction in flight commits, one the
  // state logs as pending is finished, then the next one starts in the
  // background. Writes stopped: the due eviction is refused with that stop.
  Status RunEviction();
  // Sends the in-flight eviction's PREPARE until every server has started
  // it: no root write of the next round may go before. OK if none.
  Status EnsureStarted();
  // Holds back an access that is ahead of the pace of the eviction beside
  // it. `done`: the accesses of the round before the last of those about to
  // go; `root_slots_used`: the root slots written or about to be.
  void Pace(std::uint64_t done, std::uint64_t root_slots_used);
  // Waits for the in-flight eviction, checks and commits it. OK if none.
  Status FinishInFlight();
  // Finishes an eviction the state records as under way (Open, or an
  // earlier failure), then starts a due one.
  Status FinishPending();
  // FinishInFlight when this session may still write (not read-only, lease
  // held, not fenced); OK otherwise.
  Status Settle();
  // The eviction the state records as pending, if any.
  Result<std::optional<std::uint64_t>> Pending() const;

 private:
  // The code of the servers taking part (ClientSession::participants()):
  // Lagrange weights at 0 over their points and their parity checks
  // (shamir::ParityChecks), for the checks before a commit. Recomputed
  // when the participants change.
  struct PartyCode {
    std::vector<std::size_t> servers;
    std::vector<field::Elem> lambda;
    std::vector<std::vector<field::Elem>> parity_rows;
  };
  Result<const PartyCode*> CodeOfParticipants();
  PartyCode code_;
  // Plans eviction ne, logs it (plan, positions before and after, nr = 0),
  // moves the blocks in the map and starts it on the servers.
  Status StartEviction();
  // PREPARE (attempts from record.attempt on) unless `collect_first` and the
  // servers finished that attempt already (EVICT_RESULT); then EVICT_CHECK
  // and COMMIT, and the record: the counters (and, when `record.plan` is
  // absent, the moves, which are then not in the map yet).
  Status PrepareAndCommit(const EvictionPlan& plan, EvictionRecord& record, bool collect_first);
  // PrepareAndCommit's PREPARE, RESULT and CHECK, attempt after attempt
  // within one eviction timeout; a damaged or inconsistent result is
  // remembered as the refusal.
  Status PrepareUntilChecked(const EvictionPlan& plan, EvictionRecord& record, bool collect_first);
  // PrepareAndCommit's COMMIT and its durable record.
  Status Commit(const EvictionPlan& plan, const EvictionRecord& record);
  // EVICT_PREPARE of `attempt` with fresh shares of the plan's matrices, until
  // every server answered EVICT_STARTED.
  Status SendPrepare(const EvictionPlan& plan, std::uint32_t attempt,
                     const TransportOptions& budget);
  // EVICT_RESULT: waits until every server prepared `attempt` (within
  // `budget`), asking again every kAskAgain. Between asks, every server's
  // STATUS (answered beside a PREPARE) tells busy from down: the progress of
  // a busy one is logged and told to options().on_wait ("server 0 is
  // finishing eviction 26 ..."), and a server that does not answer ends the
  // wait then, named, not at the eviction's deadline.
  Status AwaitPrepared(std::uint64_t eviction, std::uint32_t attempt,
                       const TransportOptions& budget);
  // AwaitPrepared's STATUS round after `waited`: OK once the progress is
  // told, else the failure of the first server that did not answer.
  Status TellProgress(std::uint64_t eviction, std::chrono::steady_clock::duration waited);
  static constexpr std::chrono::seconds kAskAgain{5};
  // EVICT_CHECK on every server: Integrity if the prepared buckets of this
  // attempt are not consistent sharings (oramcore/protocol/consistency.h) or,
  // with share MACs, if random combinations of them do not authenticate.
  Status CheckPrepared(std::uint64_t eviction, std::uint32_t attempt);
  // The share-MAC half of that check on the servers' combination shares
  // (kEvictCheckCombinations * m elements from each server, sizes checked).
  // A failure whose inputs do not authenticate either is logged and noted
  // but not refused (see the comment in the definition).
  Status CheckMac(std::uint64_t eviction, std::uint32_t attempt,
                  const std::vector<std::vector<field::Elem>>& combinations, const PartyCode& code);
  // MAC_OPEN: whether random combinations of the committed buckets eviction
  // `eviction` reads carry valid share MACs. Integrity if they are not one
  // sharing (NoteOddInput then names the server that changed its shares
  // when it can be told).
  Result<bool> InputsAuthentic(std::uint64_t eviction, const PartyCode& code);
  // Combination `row` of the MAC_OPEN replies was not one sharing: the
  // server whose share is off the authentic value the others open to, if
  // exactly one is, is noted as suspect (ClientSession::NoteSuspect), to be
  // excluded before the next attempt; logged either way with `what`.
  void NoteOddInput(std::uint64_t eviction, const PartyCode& code,
                    const std::vector<wire::Message>& replies, std::size_t row,
                    const std::string& what);
  // Replaces the logged pending eviction with `record` (a new attempt number
  // goes to disk before any server sees it), durably.
  Status LogRecord(const EvictionRecord& record);
  // Every A/16 accesses of an eviction that has run 1 s or more, until the
  // servers say it is computed: asks their STATUS for its progress and gives
  // the pacer a provisional estimate (EvictionPacer::FromProgress), which
  // paces the round when it is longer than the learned one.
  void AskProgress(std::chrono::steady_clock::duration elapsed, std::uint64_t root_slots_used);
  // What is left of one eviction timeout (options().evictions) begun at
  // `started`, for the attempts of one eviction to share.
  TransportOptions BudgetLeft(std::chrono::steady_clock::time_point started) const;
  const OramParams& params() const { return session_.params(); }

  ClientSession& session_;
  PositionMap& pm_;
  RootWriteQueue& roots_;
  ClientStats& stats_;
  // After `failure` of a request to the participants: whether a server found
  // down (ClientSession::ExcludeDown), or one that reported damaged storage
  // or was found holding odd inputs (ClientSession::ExcludeSuspects), was
  // excluded, so that the eviction can go on without it.
  Result<bool> ExcludedAfter(const Status& failure, std::uint64_t eviction);

  // The eviction started at the end of the last round and not committed yet,
  // as logged; `started` once every server answered EVICT_STARTED.
  struct InFlight {
    EvictionRecord record;  // plan and positions before it
    bool started = false;
    // Its attempt went out at least once: the next try sends a new attempt,
    // which servers still computing the old one take as the client giving up
    // on it (a resent attempt would queue behind the computation it repeats).
    bool sent = false;
    std::chrono::steady_clock::time_point started_at;  // when every server started it
    // The participants it went to (ClientSession::ParticipantMask): if one
    // of them has been excluded since, the others wait in vain for its SMP
    // shares, so the result is not collected: a new attempt goes at once.
    std::uint32_t participants = 0;
  };
  std::optional<InFlight> inflight_;

  // Set when a server refused an eviction for damaged storage (or its result
  // was inconsistent on every attempt): returned without asking again until
  // retry_at_.
  static constexpr std::chrono::seconds kDamagedRetry{60};
  std::optional<Status> refused_;
  std::chrono::steady_clock::time_point retry_at_{};

  EvictionPacer pacer_;
  bool pace_logged_ = false;
  // An eviction whose commit left accesses waiting at least this long is
  // logged at info level.
  static constexpr std::chrono::seconds kSlowEviction{2};
  static constexpr std::uint64_t kNoBucket = ~std::uint64_t{0};
  // The servers said the eviction is computed: no more polls until the next.
  static constexpr std::uint64_t kProgressDone = kNoBucket - 1;
  std::uint64_t progress_polled_bucket_ = kNoBucket;  // of the last poll: root slots / (A/16)
};

}  // namespace s3oram

#include "oramcore/protocol/evictor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "oramcore/base/fault_point.h"
#include "oramcore/base/random.h"
#include "oramcore/base/time_into.h"
#include "oramcore/math/field.h"
#include "oramcore/math/random_elems.h"
#include "oramcore/math/shamir.h"
#include "oramcore/math/share_mac.h"
#include "oramcore/protocol/consistency.h"
#include "oramcore/protocol/counter_agreement.h"

namespace s3oram {

using field::Elem;

namespace {

// Opens a degree-t sharing of m elements (one pointer per party) into out,
// after checking every element's shares against the code's parity checks.
// False, out unspecified, if some element's shares do not lie on one
// polynomial of degree t.
bool OpenChecked(std::span<const Elem* const> shares,
                 const std::vector<std::vector<Elem>>& parity_rows, const std::vector<Elem>& lambda,
                 std::size_t m, Elem* out) {
  for (const auto& row : parity_rows) {
    for (std::size_t c = 0; c < m; ++c) {
      Elem acc = 0;
      for (std::size_t i = 0; i < shares.size(); ++i) {
        acc = field::Add(acc, field::Mul(row[i], shares[i][c]));
      }
      if (acc != 0) return false;
    }
  }
  shamir::Recover(shares, lambda, m, out);
  return true;
}

}  // namespace

Evictor::Evictor(ClientSession& session, PositionMap& pm, ClientStats& stats, RootWriteQueue& roots)
    : session_(session),
      pm_(pm),
      roots_(roots),
      stats_(stats),
      pacer_(std::chrono::milliseconds(session.store().eviction_estimate_ms())) {}

Result<const Evictor::PartyCode*> Evictor::CodeOfParticipants() {
  const std::vector<std::size_t>& servers = session_.participants();
  if (code_.servers != servers || code_.lambda.empty()) {
    std::vector<Elem> xs;
    for (std::size_t i : servers) xs.push_back(shamir::PartyX(i));
    PartyCode code;
    code.servers = servers;
    S3ORAM_ASSIGN_OR_RETURN(code.lambda, shamir::LagrangeAtZero(xs));
    S3ORAM_ASSIGN_OR_RETURN(code.parity_rows, shamir::ParityChecks(xs, params().threshold));
    code_ = std::move(code);
  }
  return &code_;
}

Result<bool> Evictor::ExcludedAfter(const Status& failure, std::uint64_t eviction) {
  if (failure.ok()) return false;
  // A server whose stored shares failed their digests, or one found holding
  // odd inputs (NoteOddInput), is left out as suspect when the others
  // suffice: the eviction goes on among them.
  if (failure.code() == Status::Code::kDamaged || failure.code() == Status::Code::kIntegrity) {
    return session_.ExcludeSuspects();
  }
  if (!IsSilence(failure)) return false;
  return session_.ExcludeDown("eviction " + std::to_string(eviction) +
                              " could not go on with it (" + failure.message() + ")");
}

Status Evictor::RunEviction() {
  if (inflight_) S3ORAM_RETURN_IF_ERROR(FinishInFlight());
  S3ORAM_ASSIGN_OR_RETURN(auto pending, session_.store().LoadPending());
  for (const auto& op : pending) {
    if (op.kind == kPendingEvictKind) S3ORAM_RETURN_IF_ERROR(FinishPending());
  }
  if (session_.counters().nr < params().evict_rate) return Status::Ok();
  if (session_.writes_stopped()) return *session_.writes_stopped();
  return StartEviction();
}

Status Evictor::StartEviction() {
  // Every root write of the round held by every server (or written again on
  // all of them) before any of them copies the root aside.
  S3ORAM_RETURN_IF_ERROR(roots_.SettleLagging(/*wait=*/true));
  S3ORAM_ASSIGN_OR_RETURN(auto pending, session_.store().LoadPending());
  const TreeGeometry geo = params().geometry();
  TimeInto planning(stats_.timings.eviction_client_ns);
  S3ORAM_ASSIGN_OR_RETURN(EvictionPlan plan, PlanEviction(geo, session_.counters().ne, pm_));
  EvictionRecord record;
  record.eviction = session_.counters().ne;
  record.attempt = 1;
  for (const auto& [id, pos] : plan.moves) record.before.emplace(id, pm_.Find(id)->pos);
  // One durable transaction: the plan, the blocks at their new positions and
  // the new round (nr = 0). A crash after it finishes this eviction at Open
  // from the plan, before any access.
  ClientStateStore::Batch intent;
  for (const auto& [id, pos] : plan.moves) {
    intent.PutPosition(id, PositionEntry{pos, pm_.Find(id)->version});
  }
  Counters next = session_.counters();
  next.nr = 0;
  intent.SetCounters(next);
  record.plan = plan;
  intent.AddPending(PendingOp{record.eviction, kPendingEvictKind, EncodeEvictionRecord(record)});
  // The round's lagging writes are settled: their records (a settled one's
  // removal may not be durable yet) must not outlive the round.
  for (const PendingOp& op : pending) {
    if (op.kind == kPendingLagKind) intent.RemovePending(op.seq);
  }
  planning.Stop();
  {
    TimeInto timer(stats_.timings.eviction_state_commit_ns);
    S3ORAM_RETURN_IF_ERROR(session_.store().Commit(intent, /*durable=*/true));
  }
  FaultPoint("client.evict.after_intent");
  S3ORAM_RETURN_IF_ERROR(ApplyEviction(plan, pm_));
  session_.counters() = next;
  inflight_ = InFlight{std::move(record), false, false, {}, 0};
  if (stats_.evictions == 0) {
    spdlog::info(
        "eviction {} started (every {} accesses); the servers compute it while the "
        "next {} accesses go on (s3oram status shows its progress)",
        session_.counters().ne, params().evict_rate, params().evict_rate);
  }
  return EnsureStarted();
}

Status Evictor::EnsureStarted() {
  if (!inflight_ || inflight_->started) return Status::Ok();
  if (refused_ && std::chrono::steady_clock::now() < retry_at_) {
    return *refused_;
  }
  EvictionRecord& record = inflight_->record;
  // A PREPARE that failed before every server started it is sent again
  // under a new attempt (fresh shares), logged first; so is one that failed
  // in an earlier call.
  // Up to kMaxAttempts, all within one eviction timeout (a server that does
  // not answer fails the access after that time, not after a multiple of it).
  constexpr std::uint32_t kMaxAttempts = 4;
  const auto began = std::chrono::steady_clock::now();
  Status last;
  for (std::uint32_t tries = 0; tries < kMaxAttempts; ++tries) {
    if (tries > 0 &&
        std::chrono::steady_clock::now() - began >= session_.options().evictions.deadline) {
      break;
    }
    if (inflight_->sent) {
      ++record.attempt;
      ++stats_.eviction_retries;
      S3ORAM_RETURN_IF_ERROR(LogRecord(record));
    }
    inflight_->sent = true;
    inflight_->participants = session_.ParticipantMask();
    last = SendPrepare(*record.plan, record.attempt, BudgetLeft(began));
    if (last.ok()) {
      inflight_->started = true;
      inflight_->started_at = std::chrono::steady_clock::now();
      FaultPoint("client.evict.after_started");
      return Status::Ok();
    }
    spdlog::warn("eviction {} attempt {} did not start: {}", record.eviction, record.attempt,
                 last.ToString());
    // A server found down, or one that reported damaged storage, is left
    // out when the others suffice: the next attempt goes to them.
    S3ORAM_ASSIGN_OR_RETURN(const bool excluded, ExcludedAfter(last, record.eviction));
    if (last.code() == Status::Code::kDamaged && !excluded) break;
  }
  if (last.code() == Status::Code::kDamaged) {
    refused_ = last.WithContext("eviction " + std::to_string(record.eviction) +
                                " cannot run until the damaged server is repaired");
    retry_at_ = std::chrono::steady_clock::now() + kDamagedRetry;
    return *refused_;
  }
  return last.WithContext("starting eviction " + std::to_string(record.eviction));
}

TransportOptions Evictor::BudgetLeft(std::chrono::steady_clock::time_point started) const {
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
  TransportOptions budget = session_.options().evictions;
  budget.deadline = spent < session_.options().evictions.deadline
                        ? session_.options().evictions.deadline - spent
                        : std::chrono::milliseconds(1);
  // Resent after silence only past half the eviction's time: the servers
  // answer EVICT_RESULT after exchanging shares with each other, minutes
  // on a slow link or a busy machine. A connection that was replaced (a
  // restarted server) still gets the request again at once.
  budget.resend_after = std::max(budget.resend_after, budget.deadline / 2);
  budget.resend_after = std::min(budget.resend_after, budget.deadline);
  return budget;
}

Status Evictor::LogRecord(const EvictionRecord& record) {
  ClientStateStore::Batch b;
  b.RemovePending(record.eviction);
  b.AddPending(PendingOp{record.eviction, kPendingEvictKind, EncodeEvictionRecord(record)});
  return session_.store().Commit(b, /*durable=*/true);
}

void Evictor::AskProgress(std::chrono::steady_clock::duration elapsed,
                          std::uint64_t root_slots_used) {
  // Polls only an eviction that has run a while, at fixed access counts: a
  // shorter one costs at most that much wait at the round's end, and fast
  // setups (small blocks, tests) send no STATUS at all.
  static constexpr auto kProgressAfter = std::chrono::seconds(1);
  static constexpr std::uint64_t kPollsPerRound = 16;
  const std::uint64_t every = std::max<std::uint64_t>(1, params().evict_rate / kPollsPerRound);
  // Once per `every` root slots (a pipelined batch takes several at once).
  const std::uint64_t bucket = root_slots_used / every;
  if (elapsed < kProgressAfter || bucket == progress_polled_bucket_ ||
      progress_polled_bucket_ == kProgressDone) {
    return;
  }
  progress_polled_bucket_ = bucket;
  // A server's word is bounded by the client's own clock (it cannot have
  // computed longer than the client has waited) and by the eviction
  // timeout, so a wrong or lying reply paces no round beyond that.
  const auto own = std::chrono::duration_cast<std::chrono::milliseconds>(elapsed);
  const auto cap =
      std::chrono::duration_cast<EvictionPacer::Duration>(session_.options().evictions.deadline);
  EvictionPacer::Bounds slowest;
  bool unbounded = false;  // a server in round 1: no upper bound yet
  bool computing = false;  // some server still computes this eviction
  for (const auto& r : session_.QueryServers(session_.options().requests.resend_after)) {
    if (!r.status.ok()) {
      computing = true;  // says nothing: it may still be computing
      continue;
    }
    if (!r.reply.evicting || r.reply.evicting_eviction != inflight_->record.eviction ||
        r.reply.evicting_rounds != params().height) {
      continue;
    }
    computing = true;
    const auto server_elapsed =
        std::min<std::uint64_t>(r.reply.evicting_elapsed_ms,
                                static_cast<std::uint64_t>(std::max<std::int64_t>(0, own.count())));
    const EvictionPacer::Bounds b = EvictionPacer::FromProgress(
        std::chrono::milliseconds(server_elapsed), r.reply.evicting_round, r.reply.evicting_rounds);
    // The slowest server sets the pace.
    slowest.lower = std::min(cap, std::max(slowest.lower, b.lower));
    slowest.upper = std::min(cap, std::max(slowest.upper, b.upper));
    unbounded = unbounded || (b.lower > EvictionPacer::Duration::zero() &&
                              b.upper == EvictionPacer::Duration::zero());
  }
  if (unbounded) slowest.upper = EvictionPacer::Duration::zero();
  pacer_.Provisional(slowest);
  // Every server that answered has finished its part (all of them accepted
  // the PREPARE before pacing began): no more polls this round; the result
  // is collected at the round's end.
  if (!computing) progress_polled_bucket_ = kProgressDone;
}

void Evictor::Pace(std::uint64_t done, std::uint64_t root_slots_used) {
  if (!inflight_ || !inflight_->started) return;
  const auto elapsed = std::chrono::steady_clock::now() - inflight_->started_at;
  AskProgress(elapsed, root_slots_used);
  // The servers said the eviction is computed: the round's end will not
  // wait for it, so the rest of the round goes unpaced.
  if (progress_polled_bucket_ == kProgressDone) return;
  const auto delay = pacer_.Step(elapsed, done, params().evict_rate);
  if (delay <= EvictionPacer::Duration::zero()) return;
  if (!pace_logged_) {
    if (pacer_.estimate() <= EvictionPacer::Duration::zero()) {
      spdlog::info(
          "accesses are paced to eviction {}, the first this state sees: the servers' "
          "progress suggests {:.1f} s, and a round of {} accesses is made to last about "
          "that long, so that none waits for all of it at the end",
          inflight_->record.eviction, std::chrono::duration<double>(pacer_.provisional()).count(),
          params().evict_rate);
    } else if (pacer_.provisional() > pacer_.estimate()) {
      spdlog::info(
          "accesses are paced to eviction {}: the servers' progress suggests {:.1f} s, "
          "longer than the last ({:.1f} s), and a round of {} accesses is made to last "
          "about that long, so that none waits for all of it at the end",
          inflight_->record.eviction, std::chrono::duration<double>(pacer_.provisional()).count(),
          std::chrono::duration<double>(pacer_.estimate()).count(), params().evict_rate);
    } else {
      spdlog::info(
          "accesses are paced to eviction {} (the last took {:.1f} s): a round of {} "
          "accesses lasts at least that long, so that none waits for all of it at the "
          "end",
          inflight_->record.eviction, std::chrono::duration<double>(pacer_.estimate()).count(),
          params().evict_rate);
    }
    pace_logged_ = true;
  }
  TimeInto whole(stats_.timings.eviction_ns);
  TimeInto timer(stats_.timings.eviction_pace_ns);
  std::this_thread::sleep_for(delay);
}

Status Evictor::FinishInFlight() {
  if (!inflight_) return Status::Ok();
  const auto started = std::chrono::steady_clock::now();
  const std::uint64_t prepare_wait_before = stats_.timings.eviction_prepare_wait_ns;
  EvictionRecord& record = inflight_->record;
  const EvictionPlan plan = *record.plan;
  // An attempt that went out but did not start everywhere may still run on
  // some servers with the shares it carried: it is never sent again with
  // other shares, the next attempt is.
  // So is one that started on a server excluded since.
  const bool collect = inflight_->started && inflight_->participants == session_.ParticipantMask();
  if (!collect && inflight_->sent) ++record.attempt;
  const bool was_started = inflight_->started;
  const auto elapsed = started - inflight_->started_at;
  S3ORAM_RETURN_IF_ERROR(PrepareAndCommit(plan, record, /*collect_first=*/collect));
  const bool first_attempt = record.attempt == 1;
  inflight_.reset();
  // An access that waited for the servers says so once, at info level: the
  // eviction took longer than a round of accesses.
  const auto waited =
      std::chrono::nanoseconds(stats_.timings.eviction_prepare_wait_ns - prepare_wait_before);
  // The pace of the next round, kept for the next mount too (not durable:
  // a lost estimate only costs one unpaced round).
  if (was_started && first_attempt && !session_.read_only()) {
    pacer_.Learn(elapsed, waited);
    ClientStateStore::Batch b;
    b.SetEvictionEstimate(static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(pacer_.estimate()).count()));
    S3ORAM_RETURN_IF_ERROR(session_.store().Commit(b));
  }
  pacer_.ForgetProvisional();  // also when nothing was learned
  progress_polled_bucket_ = kNoBucket;
  if (waited >= kSlowEviction) {
    spdlog::info(
        "accesses waited {:.1f} s for eviction {} to be computed (the servers took "
        "longer than a round of {} accesses); committed after {:.1f} s in all",
        std::chrono::duration<double>(waited).count(), plan.eviction, params().evict_rate,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  return Status::Ok();
}

Status Evictor::FinishPending() {
  S3ORAM_ASSIGN_OR_RETURN(auto pending, session_.store().LoadPending());
  const PendingOp* op = nullptr;
  for (const auto& p : pending) {
    if (p.kind == kPendingEvictKind) op = &p;
  }
  if (!op) {
    // A due eviction that is not under way yet waits for the repair while
    // writes are stopped; Open succeeds all the same (reads need no more).
    if (session_.counters().nr >= params().evict_rate && !session_.writes_stopped())
      return RunEviction();
    return Status::Ok();
  }
  S3ORAM_ASSIGN_OR_RETURN(
      EvictionRecord record,
      DecodeEvictionRecord(op->payload, params().geometry(), params().capacity_blocks));
  if (record.eviction != session_.counters().ne) {
    return Status::Corruption("pending eviction " + std::to_string(record.eviction) +
                              " does not match the eviction counter " +
                              std::to_string(session_.counters().ne));
  }
  ++stats_.eviction_retries;
  if (record.plan) {
    // Background: the map holds the new positions already; the servers may
    // have finished this very attempt (a clean unmount leaves it running).
    const EvictionPlan plan = *record.plan;
    S3ORAM_RETURN_IF_ERROR(PrepareAndCommit(plan, record, /*collect_first=*/true));
  } else {
    // Logged by a client that ran evictions to the end while accesses
    // waited: the plan follows from the positions, which it then updates.
    S3ORAM_ASSIGN_OR_RETURN(EvictionPlan plan,
                            PlanEviction(params().geometry(), session_.counters().ne, pm_));
    ++record.attempt;
    S3ORAM_RETURN_IF_ERROR(PrepareAndCommit(plan, record, /*collect_first=*/false));
  }
  // The round the access counter is in may be full already (the eviction
  // was started at its end and the client stopped there): the next starts.
  if (session_.counters().nr >= params().evict_rate && !session_.writes_stopped())
    return RunEviction();
  return Status::Ok();
}

Status Evictor::SendPrepare(const EvictionPlan& plan, std::uint32_t attempt,
                            const TransportOptions& budget) {
  const OramParams& p = params();
  const std::size_t step_elems = 2 * std::size_t{p.bucket_size} * p.bucket_size;
  std::vector<Elem> dense(plan.steps.size() * step_elems);
  {
    const TimeInto expanding(stats_.timings.eviction_client_ns);
    for (std::size_t s = 0; s < plan.steps.size(); ++s) {
      ExpandStepMatrix(plan.steps[s], p.bucket_size,
                       std::span<Elem>(dense).subspan(s * step_elems, step_elems));
    }
  }
  // Fresh shares for every attempt: a retry must not reuse randomness.
  S3ORAM_ASSIGN_OR_RETURN(
      auto replies, session_.ExchangeShared(
                        dense,
                        [&plan, attempt, mask = session_.ParticipantMask()](
                            std::vector<Elem>&& share, const wire::ShareSeed& seed) {
                          return wire::Body{wire::EvictPrepareRequest{
                              plan.eviction, attempt, plan.leaf, std::move(share), seed, mask}};
                        },
                        wire::MessageType::kEvictStartedReply, budget,
                        stats_.timings.eviction_client_ns, stats_.timings.eviction_prepare_wait_ns,
                        // The seeded participant gets the seed of its matrices once the others
                        // have theirs (EVICT_STARTED): sent with them, it would start the
                        // share exchange while they still receive megabytes over the
                        // client's uplink, and wait out its peer timeout for them (a
                        // paper-home link: 37 s for two shares of the 1 GiB default's
                        // matrices, against a 30 s peer timeout).
                        ClientSession::Seeding::kSeededLast));
  for (std::size_t k = 0; k < replies.size(); ++k) {
    const auto& r = std::get<wire::EvictStartedReply>(replies[k].body);
    if (r.eviction != plan.eviction || r.attempt != attempt) {
      return Status::Protocol(
          "server " + std::to_string(session_.participants()[k]) + " started eviction " +
          std::to_string(r.eviction) + " attempt " + std::to_string(r.attempt) + " instead of " +
          std::to_string(plan.eviction) + " attempt " + std::to_string(attempt));
    }
  }
  return Status::Ok();
}

Status Evictor::AwaitPrepared(std::uint64_t eviction, std::uint32_t attempt,
                              const TransportOptions& budget) {
  using Clock = std::chrono::steady_clock;
  const auto began = Clock::now();
  const auto until = began + budget.deadline;
  TimeInto timer(stats_.timings.eviction_prepare_wait_ns);
  for (;;) {
    // One ask, answered the moment the last server is done. A server takes
    // an ask that repeats one it still holds as a replacement (Server's
    // ServeAside), so the wait holds one place in its queue.
    const auto asked = Clock::now();
    TransportOptions slice = budget;
    slice.deadline = std::min<std::chrono::milliseconds>(
        kAskAgain, std::chrono::duration_cast<std::chrono::milliseconds>(until - asked));
    if (slice.deadline <= std::chrono::milliseconds(0))
      slice.deadline = std::chrono::milliseconds(1);
    const wire::Header h = session_.NextHeader();
    const auto frame = wire::Encode(h, wire::EvictResultRequest{eviction, attempt});
    const std::vector<std::size_t>& servers = session_.participants();
    std::vector<std::vector<std::uint8_t>> frames(servers.size(), frame);
    auto replies = session_.servers().ExchangeWith(servers, frames, h,
                                                   wire::MessageType::kEvictPrepareReply, slice);
    if (replies.ok()) {
      for (std::size_t k = 0; k < replies->size(); ++k) {
        if (std::get<wire::EvictPrepareReply>((*replies)[k].body).eviction != eviction) {
          return Status::Protocol("server " + std::to_string(servers[k]) +
                                  " answered for another eviction");
        }
      }
      return Status::Ok();
    }
    // An answer (an attempt that failed, a refusal) ends the wait; silence
    // within the budget does not: STATUS says whether the silent server is
    // busy (asked again) or down (the wait fails now).
    if (!IsSilence(replies.status()) || Clock::now() >= until) return replies.status();
    S3ORAM_RETURN_IF_ERROR(TellProgress(eviction, Clock::now() - began));
  }
}

Status Evictor::TellProgress(std::uint64_t eviction, std::chrono::steady_clock::duration waited) {
  const auto reports = session_.QueryServers(session_.options().requests.deadline);
  std::string busy;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const ServerReport& r = reports[i];
    if (session_.excluded(i)) continue;
    if (!r.status.ok()) {
      return r.status.WithContext("waiting for eviction " + std::to_string(eviction) + ": server " +
                                  std::to_string(i) + " stopped answering");
    }
    const wire::StatusReply& p = r.reply;
    if (!p.evicting) continue;
    char line[256];
    std::snprintf(line, sizeof line,
                  "%sserver %zu is finishing eviction %llu (attempt %u, round %u/%u, %s), about "
                  "%u %% after %.0f s",
                  busy.empty() ? "" : "; ", i, static_cast<unsigned long long>(p.evicting_eviction),
                  p.evicting_attempt, p.evicting_round, p.evicting_rounds,
                  wire::EvictPhaseName(p.evicting_phase), p.evicting_permille / 10,
                  static_cast<double>(p.evicting_elapsed_ms) / 1000);
    busy += line;
  }
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(waited).count();
  const std::string message =
      busy.empty() ? "waited " + std::to_string(seconds) + " s for the result of eviction " +
                         std::to_string(eviction) +
                         "; every server answers STATUS, none reports it under way"
                   : busy + "; waiting for it (" + std::to_string(seconds) + " s so far)";
  spdlog::info("{}", message);
  if (session_.options().on_wait) session_.options().on_wait(message);
  return Status::Ok();
}

Status Evictor::PrepareAndCommit(const EvictionPlan& plan, EvictionRecord& record,
                                 bool collect_first) {
  // A server refused this eviction for damaged storage a moment ago: it will
  // again until it is repaired, and every attempt costs the other servers'
  // SMP timeout. Accesses that need the eviction fail at once meanwhile (the
  // tree is unchanged; nothing is lost), then it is tried again.
  if (refused_ && std::chrono::steady_clock::now() < retry_at_) {
    return *refused_;
  }

  // If any server already committed this eviction, every server prepared it
  // (COMMIT is sent only after all PREPAREs succeeded): just commit everywhere.
  bool committed_somewhere = false;
  if (collect_first || record.attempt > 1) {
    const auto reports = session_.QueryServers(session_.options().requests.deadline);
    for (std::size_t i = 0; i < reports.size(); ++i) {
      const ServerReport& r = reports[i];
      if (session_.excluded(i)) continue;
      if (!r.status.ok()) {
        S3ORAM_ASSIGN_OR_RETURN(const bool excluded, ExcludedAfter(r.status, plan.eviction));
        if (excluded && session_.excluded(i)) continue;
        return r.status.WithContext("finishing eviction");
      }
      if (r.reply.applied_evictions > plan.eviction) committed_somewhere = true;
    }
  }

  if (!committed_somewhere) {
    S3ORAM_RETURN_IF_ERROR(PrepareUntilChecked(plan, record, collect_first));
  }
  return Commit(plan, record);
}

Status Evictor::PrepareUntilChecked(const EvictionPlan& plan, EvictionRecord& record,
                                    bool collect_first) {
  // Up to kMaxAttempts PREPAREs (a peer's transient failure makes the
  // servers refuse an attempt quickly), all within one eviction timeout:
  // a server that does not answer fails the eviction after that time, not
  // after a multiple of it.
  constexpr std::uint32_t kMaxAttempts = 4;
  const auto started = std::chrono::steady_clock::now();
  auto budget_left = [&]() { return BudgetLeft(started); };
  Status last;
  if (collect_first) {
    // The servers may have it done already (in flight, or left running).
    last = AwaitPrepared(plan.eviction, record.attempt, budget_left());
    if (last.ok()) last = CheckPrepared(plan.eviction, record.attempt);
    if (!last.ok()) {
      spdlog::warn("eviction {} attempt {} failed: {}", plan.eviction, record.attempt,
                   last.ToString());
    }
  }
  // A server that did not answer (nor its STATUS, AwaitPrepared) would not
  // answer a new attempt either: the eviction fails now, naming it, unless
  // it was found down and the others go on without it.
  bool left_out = false;
  if (collect_first && !last.ok()) {
    S3ORAM_ASSIGN_OR_RETURN(left_out, ExcludedAfter(last, plan.eviction));
  }
  if (!collect_first ||
      (!last.ok() && (left_out || (last.code() != Status::Code::kDamaged && !IsSilence(last))))) {
    for (std::uint32_t tries = 0; tries < kMaxAttempts; ++tries) {
      // Checked before the first try too when the servers were asked for
      // a result first: if that used the whole time, a new attempt now
      // would only make them drop the one nearly done.
      if ((tries > 0 || collect_first) &&
          std::chrono::steady_clock::now() - started >= session_.options().evictions.deadline) {
        break;
      }
      if (collect_first || tries > 0) {
        ++record.attempt;
        ++stats_.eviction_retries;
      }
      S3ORAM_RETURN_IF_ERROR(LogRecord(record));
      last = SendPrepare(plan, record.attempt, budget_left());
      if (last.ok()) last = AwaitPrepared(plan.eviction, record.attempt, budget_left());
      // Verified before anything commits: the prepared buckets must be
      // consistent sharings on every server. A failure (a fault in a
      // server's memory or computation, or wrong shares dealt in the
      // exchange) leaves every server's live tree as it was; a new attempt
      // recomputes the eviction with fresh randomness.
      if (last.ok()) last = CheckPrepared(plan.eviction, record.attempt);
      if (last.ok()) break;
      spdlog::warn("eviction {} attempt {} failed: {}", plan.eviction, record.attempt,
                   last.ToString());
      // A server whose stored shares failed their digests refuses every
      // attempt the same way until it is repaired: stop here, with the tree
      // as it was (no server committed anything). So does a silent one.
      // Either goes on without that server if it could be left out.
      if (last.code() == Status::Code::kDamaged || IsSilence(last)) {
        S3ORAM_ASSIGN_OR_RETURN(const bool excluded, ExcludedAfter(last, plan.eviction));
        if (!excluded) break;
      }
      // A server found holding odd inputs (NoteOddInput) is left out of the
      // next attempt when the others suffice.
      if (last.code() == Status::Code::kIntegrity) {
        S3ORAM_RETURN_IF_ERROR(ExcludedAfter(last, plan.eviction).status());
      }
    }
  }
  if (last.code() == Status::Code::kDamaged || last.code() == Status::Code::kIntegrity) {
    refused_ = last.WithContext(
        "eviction " + std::to_string(plan.eviction) +
        (last.code() == Status::Code::kDamaged
             ? " cannot run until the damaged server is repaired"
             : " was refused: its result was inconsistent on every attempt; run s3oram scrub"));
    retry_at_ = std::chrono::steady_clock::now() + kDamagedRetry;
    spdlog::error("{}", refused_->message());
    return *refused_;
  }
  if (!last.ok()) return last.WithContext("eviction " + std::to_string(plan.eviction));
  refused_.reset();
  return Status::Ok();
}

Status Evictor::Commit(const EvictionPlan& plan, const EvictionRecord& record) {
  FaultPoint("client.evict.after_prepare");
  // To the participants; one found down meanwhile (it prepared, but may
  // never commit) is left out if the others go on without it, and the
  // COMMIT goes to them again (a duplicate is answered as done).
  for (int round = 0;; ++round) {
    S3ORAM_ASSIGN_OR_RETURN(const wire::Header h, session_.NextMutationHeader());
    const std::vector<std::size_t>& servers = session_.participants();
    std::vector<std::vector<std::uint8_t>> frames(
        servers.size(), wire::Encode(h, wire::EvictCommitRequest{plan.eviction}));
    TimeInto timer(stats_.timings.eviction_commit_wait_ns);
    const Status st = session_.servers()
                          .ExchangeWith(servers, frames, h, wire::MessageType::kEvictCommitReply,
                                        session_.options().requests)
                          .status();
    if (st.ok()) break;
    if (round == 0) {
      S3ORAM_ASSIGN_OR_RETURN(const bool excluded, ExcludedAfter(st, plan.eviction));
      if (excluded) continue;
    }
    return st.WithContext("committing eviction " + std::to_string(plan.eviction));
  }

  FaultPoint("client.evict.after_commit");
  // Every server has made the eviction live: record it (and, for a record
  // without a plan, the new positions, with the next round).
  Counters next = session_.counters();
  next.ne = plan.eviction + 1;
  ClientStateStore::Batch batch;
  const bool moves_applied = record.plan.has_value();
  if (!moves_applied) {
    next.nr = 0;
    for (const auto& [id, pos] : plan.moves) {
      const PositionEntry* e = pm_.Find(id);
      if (!e) {
        return Status::Corruption("eviction moved block " + std::to_string(id) +
                                  " that is not mapped");
      }
      batch.PutPosition(id, PositionEntry{pos, e->version});
    }
  }
  batch.SetCounters(next);
  batch.RemovePending(plan.eviction);
  // A recorded refusal of this eviction is over: it committed.
  const auto& note = session_.store().problem_note();
  const bool refusal_resolved =
      note && !note->damaged &&
      note->text.rfind("eviction " + std::to_string(plan.eviction) + " ", 0) == 0;
  if (refusal_resolved) batch.SetProblemNote(std::nullopt);
  // Durable: the servers have moved the blocks; positions must not roll back.
  {
    TimeInto timer(stats_.timings.eviction_state_commit_ns);
    S3ORAM_RETURN_IF_ERROR(session_.store().Commit(batch, /*durable=*/true));
  }
  if (refusal_resolved) {
    session_.ProblemNoteCleared();
    spdlog::info("eviction {} committed: the problem recorded when it was refused is resolved",
                 plan.eviction);
  }
  session_.counters() = next;
  if (!moves_applied) S3ORAM_RETURN_IF_ERROR(ApplyEviction(plan, pm_));
  ++stats_.evictions;
  spdlog::debug("eviction {} along leaf {} committed: {} blocks moved", plan.eviction, plan.leaf,
                plan.moves.size());
  return Status::Ok();
}

Status Evictor::CheckPrepared(std::uint64_t eviction, std::uint32_t attempt) {
  S3ORAM_ASSIGN_OR_RETURN(const PartyCode* code, CodeOfParticipants());
  if (code->parity_rows.empty()) return Status::Ok();  // no redundancy to check with
  const TimeInto timer(stats_.timings.eviction_check_ns);
  wire::ParitySeed seed;
  random::Bytes(seed);
  wire::Header h = session_.NextHeader();
  const auto frame = wire::Encode(h, wire::EvictCheckRequest{eviction, attempt, seed});
  std::vector<std::vector<std::uint8_t>> frames(code->servers.size(), frame);
  S3ORAM_ASSIGN_OR_RETURN(
      auto replies,
      session_.servers().ExchangeWith(code->servers, frames, h, wire::MessageType::kEvictCheckReply,
                                      session_.options().requests));
  const std::size_t m = params().elems_per_slot();
  const std::size_t combined_elems = wire::kEvictCheckCombinations * m;
  std::vector<std::vector<Elem>> digests;
  std::vector<std::vector<Elem>> combinations;
  for (std::size_t k = 0; k < replies.size(); ++k) {
    const std::size_t i = code->servers[k];
    auto& r = std::get<wire::EvictCheckReply>(replies[k].body);
    if (r.eviction != eviction) {
      return Status::Protocol("server " + std::to_string(i) + " checked eviction " +
                              std::to_string(r.eviction) + " instead of " +
                              std::to_string(eviction));
    }
    if (r.combination.size() != combined_elems) {
      return Status::Protocol("server " + std::to_string(i) + " sent " +
                              std::to_string(r.combination.size()) +
                              " combination elements for eviction " + std::to_string(eviction) +
                              ", expected " + std::to_string(combined_elems));
    }
    digests.push_back(std::move(r.digests));
    combinations.push_back(std::move(r.combination));
  }
  const auto bad = InconsistentSlots(code->parity_rows, digests);
  if (bad.empty()) return CheckMac(eviction, attempt, combinations, *code);
  const std::size_t Z = params().bucket_size;
  const std::string where =
      "bucket index " + std::to_string(bad[0] / Z) + " slot " + std::to_string(bad[0] % Z);
  spdlog::error(
      "eviction {} attempt {}: {} prepared slots are not consistent sharings across "
      "the servers (first: {} of the eviction's bucket list); not committed",
      eviction, attempt, bad.size(), where);
  return Status::Integrity("eviction " + std::to_string(eviction) + " attempt " +
                           std::to_string(attempt) + ": " + std::to_string(bad.size()) +
                           " prepared slots are inconsistent across the servers " +
                           session_.ServerSetName() + " (first: " + where +
                           "); a server computed or dealt wrong shares; nothing was committed");
}

Status Evictor::CheckMac(std::uint64_t eviction, std::uint32_t attempt,
                         const std::vector<std::vector<Elem>>& combinations,
                         const PartyCode& code) {
  // A filesystem made before share MACs, or a rotation begun by a build
  // before their halves: consistency is all that is checked.
  if (session_.codec().combination_check() == BlockCodec::CombinationCheck::kNone) {
    return Status::Ok();
  }
  const std::size_t m = params().elems_per_slot();
  const std::size_t n = combinations.size();
  // Each combination is a degree-t sharing like any slot: its shares must
  // satisfy the parity checks (the per-slot digests already passed, so a
  // failure here means a server answered about other shares than it holds),
  // then the opened value must carry a valid tag.
  auto refused = [&](const std::string& what) {
    spdlog::error("eviction {} attempt {}: {}; not committed", eviction, attempt, what);
    return Status::Integrity("eviction " + std::to_string(eviction) + " attempt " +
                             std::to_string(attempt) + ": " + what + " (servers " +
                             session_.ServerSetName() + "); nothing was committed");
  };
  std::vector<Elem> opened(m);
  std::vector<const Elem*> ptrs(n);
  for (std::size_t r = 0; r < wire::kEvictCheckCombinations; ++r) {
    for (std::size_t i = 0; i < n; ++i) ptrs[i] = combinations[i].data() + r * m;
    if (!OpenChecked(ptrs, code.parity_rows, code.lambda, m, opened.data())) {
      return refused(
          "the servers' shares of a check combination are inconsistent across "
          "the servers (a server answered the check about other shares than "
          "it holds)");
    }
    if (session_.codec().CombinationMacValid(opened)) continue;
    // The output does not authenticate. Either a server dealt wrong shares
    // in this eviction, or a value that was already wrong at rest (all
    // servers agreeing on it: a server rebuilt from a damaged peer) was
    // moved. Only the first is refused: refusing the second would stop every
    // eviction through that bucket for good, and the value is lost either way.
    S3ORAM_ASSIGN_OR_RETURN(const bool inputs_authentic, InputsAuthentic(eviction, code));
    if (inputs_authentic) {
      return refused(
          "the prepared buckets are consistent across the servers but do not "
          "authenticate (share MAC) while the buckets they were computed from do: "
          "a server dealt a consistent sharing of wrong values during the eviction");
    }
    const Status at_rest = Status::Integrity(
        "the buckets eviction " + std::to_string(eviction) +
        " reads already hold a value that is consistent across the servers but does not "
        "authenticate (share MAC): a block stored there is lost (e.g. a server was rebuilt "
        "from a damaged peer). The eviction goes ahead checked for consistency only; "
        "s3oram fsck -y --zero-damaged finds and frees the lost block");
    spdlog::error("{}", at_rest.message());
    session_.NoteProblem(at_rest);
    return Status::Ok();
  }
  return Status::Ok();
}

Result<bool> Evictor::InputsAuthentic(std::uint64_t eviction, const PartyCode& code) {
  const std::size_t m = params().elems_per_slot();
  const std::size_t rows = wire::kEvictCheckCombinations;
  wire::ParitySeed seed;
  random::Bytes(seed);
  wire::Header h = session_.NextHeader();
  const auto frame = wire::Encode(h, wire::MacOpenRequest{eviction, seed});
  std::vector<std::vector<std::uint8_t>> frames(code.servers.size(), frame);
  S3ORAM_ASSIGN_OR_RETURN(
      auto replies,
      session_.servers().ExchangeWith(code.servers, frames, h, wire::MessageType::kMacOpenReply,
                                      session_.options().evictions));
  std::vector<const Elem*> ptrs;
  for (std::size_t k = 0; k < replies.size(); ++k) {
    const std::size_t i = code.servers[k];
    const auto& r = std::get<wire::MacOpenReply>(replies[k].body);
    if (r.eviction != eviction || r.combination.size() != rows * m) {
      return Status::Protocol(
          "server " + std::to_string(i) + " answered MAC_OPEN for another eviction or with " +
          std::to_string(r.combination.size()) + " elements, expected " + std::to_string(rows * m));
    }
    ptrs.push_back(r.combination.data());
  }
  std::vector<Elem> opened(m);
  std::vector<const Elem*> row_ptrs(ptrs.size());
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t i = 0; i < ptrs.size(); ++i) row_ptrs[i] = ptrs[i] + r * m;
    if (!OpenChecked(row_ptrs, code.parity_rows, code.lambda, m, opened.data())) {
      Status inconsistent = Status::Integrity(
          "eviction " + std::to_string(eviction) +
          ": the buckets it reads are inconsistent across the servers " + session_.ServerSetName() +
          " (a combination of them is not one sharing): a server's stored shares changed");
      NoteOddInput(eviction, code, replies, r, inconsistent.message());
      return inconsistent;
    }
    if (!session_.codec().CombinationMacValid(opened)) return false;
  }
  return true;
}

void Evictor::NoteOddInput(std::uint64_t eviction, const PartyCode& code,
                           const std::vector<wire::Message>& replies, std::size_t row,
                           const std::string& what) {
  // The inputs are what each server keeps: a share changed at rest (with
  // its digest, or it would have reported damage) is that server's own, so
  // the one server without which the others open to an authentic value is
  // the one that changed it. (An eviction's own faults, dealt by one server
  // to another, are not attributed: the receiver would be named.)
  const std::size_t m = params().elems_per_slot();
  std::vector<std::vector<Elem>> shares;
  for (const wire::Message& reply : replies) {
    const auto& c = std::get<wire::MacOpenReply>(reply.body).combination;
    shares.emplace_back(c.begin() + static_cast<std::ptrdiff_t>(row * m),
                        c.begin() + static_cast<std::ptrdiff_t>((row + 1) * m));
  }
  const auto odd = OddShareOut(
      shares, m,
      [this](std::span<const Elem> v) { return session_.codec().CombinationMacValid(v); },
      code.servers);
  if (!odd) {
    spdlog::error("{}; which server changed them cannot be told: s3oram scrub names it", what);
    return;
  }
  const std::size_t server = code.servers[*odd];
  spdlog::error("{}: server {} ({}) holds the odd shares (the others open to authentic values)",
                what, server, session_.servers().endpoint(server));
  session_.NoteSuspect(server, "its stored shares of the buckets eviction " +
                                   std::to_string(eviction) +
                                   " reads are not the ones the others' authenticate (changed at "
                                   "rest, digests and all)");
}

Status Evictor::Settle() {
  if (!inflight_ || session_.read_only() || !session_.lease_held() || session_.fenced())
    return Status::Ok();
  TimeInto timer(stats_.timings.eviction_ns);
  return FinishInFlight();
}

Result<std::optional<std::uint64_t>> Evictor::Pending() const {
  S3ORAM_ASSIGN_OR_RETURN(const std::vector<PendingOp> pending, session_.store().LoadPending());
  for (const PendingOp& op : pending) {
    if (op.kind == kPendingEvictKind) return std::optional<std::uint64_t>(op.seq);
  }
  return std::optional<std::uint64_t>();
}

}  // namespace s3oram

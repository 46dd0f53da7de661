// STATUS and the progress of the PREPARE under way (read by STATUS from
// another thread: everything here under aside_mu), and the quick reads that
// answer from the state the last request left.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "serverd/lie.h"
#include "serverd/request_handler_internal.h"

namespace s3oram::serverd {

Result<wire::Body> RequestHandler::Impl::HandleStatus() {
  wire::StatusReply r = MakeStatus();
  const std::lock_guard lock(aside_mu);
  return wire::Body{WithProgress(std::move(r))};
}

Result<wire::Body> RequestHandler::Impl::HandleStats() {
  const std::lock_guard lock(aside_mu);
  return wire::Body{stats};
}

wire::StatusReply RequestHandler::Impl::MakeStatus(bool* preparing) const {
  wire::StatusReply r;
  r.server_index = config.index;
  if (store && store->rebuilding()) {
    // Not live: a client must not take it for an initialised server.
    r.rebuilding = true;
    r.shape = store->meta().shape;
    r.epoch = rebuild_target ? rebuild_target->epoch : 0;
    if (store->catching_up()) {
      // Caught up in place: the state it is caught up from (a client
      // catching it up again sends what changed since).
      r.applied_seq = store->meta().applied_seq;
      r.applied_evictions = store->meta().applied_evictions;
    }
    r.share_file_bytes = store->inspection().file_bytes();
    r.allocated_bytes = store->inspection().allocated_bytes();
    r.peer_bytes_sent = peers->bytes_sent();
  } else if (store) {
    const ServerMeta& m = store->meta();
    r.initialized = true;
    r.shape = m.shape;
    r.epoch = m.epoch;
    r.applied_seq = m.applied_seq;
    r.applied_evictions = m.applied_evictions;
    // The shadow is the PREPARE thread's while one runs: nothing is sealed then.
    bool running = false;
    {
      const std::lock_guard lock(aside_mu);
      running = progress.active;
    }
    r.prepared_eviction = running ? 0 : store->shadow().SealedEviction();
    if (preparing != nullptr) *preparing = running;
    r.share_file_bytes = store->inspection().file_bytes();
    r.allocated_bytes = store->inspection().allocated_bytes();
    r.peer_bytes_sent = peers->bytes_sent();
    if (Lies("counters")) r.epoch = r.applied_evictions = UINT64_MAX;
  }
  return r;
}

void RequestHandler::Impl::PublishQuickState() {
  QuickState q;
  q.status = MakeStatus(&q.status_while_preparing);  // takes aside_mu itself
  if (store) {
    q.has_store = true;
    q.live_store = !store->rebuilding();
    q.fs_id = store->meta().fs_id;
  }
  q.lease = lease;
  q.max_epoch = max_epoch;
  q.lease_last_seen = lease_last_seen;
  if (backups) {
    q.has_backups = true;
    q.backups = BackupListToSay();
  }
  const std::lock_guard lock(aside_mu);
  quick = std::move(q);
}

std::optional<std::vector<std::uint8_t>> RequestHandler::Impl::AnswerQuickRead(
    std::span<const std::uint8_t> frame) {
  auto decoded = wire::Decode(frame);
  if (!decoded.ok()) return std::nullopt;  // the ordered way says what is wrong
  const wire::Message& msg = *decoded;
  const std::lock_guard lock(aside_mu);
  // The checks Dispatch runs for these rows, on the published state; any
  // request they would refuse goes the ordered way, which says why.
  const bool same_filesystem = quick.live_store && msg.header.fs_id == quick.fs_id;
  wire::Body body;
  if (std::holds_alternative<wire::StatusRequest>(msg.body)) {
    // Published while a PREPARE computed, which has ended since: the
    // published STATUS would say "nothing prepared" until the next
    // publication; the ordered way answers it live.
    if (quick.status_while_preparing && !progress.active) return std::nullopt;
    body = WithProgress(quick.status);
  } else if (std::holds_alternative<wire::StatsRequest>(msg.body)) {
    body = stats;
  } else if (std::holds_alternative<wire::LeaseQueryRequest>(msg.body) && same_filesystem) {
    body = LeaseReplyOf(quick.lease, quick.max_epoch, quick.lease_last_seen, false);
  } else if (std::holds_alternative<wire::BackupListRequest>(msg.body) && same_filesystem &&
             quick.has_backups) {
    body = wire::BackupListReply{quick.backups};
  } else {
    return std::nullopt;
  }
  ++stats.requests;
  wire::Header reply_header = msg.header;
  if (quick.has_store) reply_header.fs_id = quick.fs_id;
  return wire::Encode(reply_header, body);
}

void RequestHandler::Impl::SetProgress(std::uint32_t round, wire::EvictPhase phase) {
  const std::lock_guard lock(aside_mu);
  progress.round = round;
  progress.phase = phase;
}

wire::StatusReply RequestHandler::Impl::WithProgress(wire::StatusReply r) const {
  if (!progress.active) return r;
  static constexpr double kPhaseStart[] = {0.0, 0.05, 0.6, 0.8, 0.9};
  r.evicting = true;
  r.evicting_eviction = progress.eviction;
  r.evicting_attempt = progress.attempt;
  r.evicting_round = progress.round;
  r.evicting_rounds = progress.rounds;
  r.evicting_phase = static_cast<std::uint32_t>(progress.phase);
  const auto phase = static_cast<std::size_t>(progress.phase);
  if (progress.phase == wire::EvictPhase::kSeal || progress.rounds == 0) {
    r.evicting_permille = 990;
  } else {
    const double done =
        (progress.round - 1 + kPhaseStart[std::min<std::size_t>(phase, 4)]) / progress.rounds;
    r.evicting_permille = static_cast<std::uint32_t>(std::clamp(done, 0.0, 0.99) * 1000);
  }
  r.evicting_elapsed_ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - progress.started)
          .count());
  return r;
}

}  // namespace s3oram::serverd

// STATUS and the progress of the PREPARE under way (read by STATUS from
// another thread: everything here under aside_mu).
#include <algorithm>
#include <chrono>
#include <mutex>

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

wire::StatusReply RequestHandler::Impl::MakeStatus() const {
  wire::StatusReply r;
  r.server_index = config.index;
  if (store && store->rebuilding()) {
    // Not live: a client must not take it for an initialised server.
    r.rebuilding = true;
    r.shape = store->meta().shape;
    r.epoch = rebuild_target ? rebuild_target->epoch : 0;
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
    r.share_file_bytes = store->inspection().file_bytes();
    r.allocated_bytes = store->inspection().allocated_bytes();
    r.peer_bytes_sent = peers->bytes_sent();
    if (Lies("counters")) r.epoch = r.applied_evictions = UINT64_MAX;
  }
  return r;
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

// Who may send what: the store and filesystem checks every request passes, and
// the single-writer lease (LEASE_ACQUIRE, LEASE_RELEASE, LEASE_QUERY; the fencing
// of every tree request by CheckHolder).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "serverd/lease_file.h"
#include "serverd/lie.h"
#include "serverd/request_handler_internal.h"

namespace s3oram::serverd {

Status RequestHandler::Impl::CheckHolder(const wire::Header& h) {
  S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
  if (!lease.held()) {
    return Status::LeaseHeld(
        "no client holds this filesystem's lease (it was released): "
        "the client must open the filesystem again");
  }
  if (h.epoch != lease.holder_epoch) {
    return Status::LeaseHeld("fenced: epoch " + std::to_string(h.epoch) +
                             " does not hold this filesystem's lease (epoch " +
                             std::to_string(lease.holder_epoch) +
                             " does): another client took it over");
  }
  lease_last_seen = Clock::now();
  return Status::Ok();
}

wire::LeaseReply RequestHandler::Impl::LeaseState(bool granted) const {
  return LeaseReplyOf(lease, max_epoch, lease_last_seen, granted);
}

wire::LeaseReply RequestHandler::Impl::LeaseReplyOf(const LeaseRecord& lease,
                                                    std::uint64_t max_epoch,
                                                    Clock::time_point last_seen, bool granted) {
  wire::LeaseReply r;
  r.granted = granted;
  r.holder_epoch = lease.holder_epoch;
  r.holder = lease.holder;
  r.highest_epoch = std::max(lease.highest_epoch, max_epoch);
  if (Lies("counters")) r.highest_epoch = UINT64_MAX;
  if (lease.held()) {
    const auto now_ms =
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count());
    r.held_ms = now_ms > lease.acquired_unix_ms ? now_ms - lease.acquired_unix_ms : 0;
    r.idle_ms = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_seen).count());
  }
  return r;
}

Result<wire::Body> RequestHandler::Impl::HandleLeaseAcquire(const wire::Header& h,
                                                            const wire::LeaseAcquireRequest& req) {
  if (req.holder.size() > kMaxLeaseHolderBytes) {
    return Status::InvalidArgument("lease holder description longer than " +
                                   std::to_string(kMaxLeaseHolderBytes) + " bytes");
  }
  if (lease.held() && lease.holder_epoch == h.epoch) {
    lease_last_seen = Clock::now();
    if (lease.holder != req.holder) {
      LeaseRecord next = lease;
      next.holder = req.holder;
      S3ORAM_RETURN_IF_ERROR(SaveLease(config.data_dir, next, config.sync));
      lease = next;
    }
    return wire::Body{LeaseState(true)};
  }
  if (lease.held() && !req.force) return wire::Body{LeaseState(false)};
  // Epochs only grow: an ACQUIRE older than one already granted (or used
  // by a mutation) is a dead client's, delayed or replayed.
  max_epoch = std::max({max_epoch, store->meta().epoch, lease.highest_epoch});
  if (h.epoch <= max_epoch && h.epoch != lease.holder_epoch) {
    return Status::LeaseHeld("stale epoch " + std::to_string(h.epoch) + ": epoch " +
                             std::to_string(max_epoch) +
                             " already held this filesystem; open it again");
  }
  LeaseRecord next;
  next.holder_epoch = h.epoch;
  next.holder = req.holder;
  next.acquired_unix_ms =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  // Durable before the grant is acknowledged: a restarted server must still
  // fence the previous holder, and never grant this epoch again. (The
  // store's own epoch stays the last one that changed the tree, which is
  // how a client tells that its state file is stale.)
  next.highest_epoch = std::max(lease.highest_epoch, h.epoch);
  S3ORAM_RETURN_IF_ERROR(SaveLease(config.data_dir, next, config.sync));
  if (lease.held()) {
    spdlog::warn("lease of epoch {} taken over by epoch {} (forced)", lease.holder_epoch, h.epoch);
  } else {
    spdlog::info("lease granted to epoch {}", h.epoch);
  }
  lease = next;
  max_epoch = h.epoch;
  lease_last_seen = Clock::now();
  return wire::Body{LeaseState(true)};
}

Result<wire::Body> RequestHandler::Impl::HandleLeaseRelease(const wire::Header& h) {
  if (lease.held() && lease.holder_epoch == h.epoch) {
    LeaseRecord freed;
    freed.highest_epoch = lease.highest_epoch;
    S3ORAM_RETURN_IF_ERROR(SaveLease(config.data_dir, freed, config.sync));
    spdlog::info("lease of epoch {} released", h.epoch);
    lease = freed;
  }
  return wire::Body{LeaseState(false)};
}

Status RequestHandler::Impl::CheckRequest(const wire::Header& h, bool needs_store) {
  if (!needs_store) return Status::Ok();
  if (!store) return Status::FailedPrecondition("server holds no filesystem; run s3oram init");
  if (store->rebuilding()) {
    return Status::FailedPrecondition(
        "server " + std::to_string(config.index) +
        " is being rebuilt (s3oram rebuild) and serves no requests until the rebuild finishes");
  }
  if (h.fs_id != store->meta().fs_id) {
    return Status::FailedPrecondition("request for filesystem " + HexId(h.fs_id) +
                                      " but this server holds " + HexId(store->meta().fs_id));
  }
  return Status::Ok();
}

Result<wire::Body> RequestHandler::Impl::HandleLeaseQuery() {
  return wire::Body{LeaseState(false)};
}

}  // namespace s3oram::serverd

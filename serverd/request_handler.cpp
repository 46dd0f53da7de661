// RequestHandler: the per-request logic of s3oram-serverd (see request_handler.h).
// Moved out of Server unchanged except that SMP rounds go through PeerExchange
// and the handler itself checks the length of every peer's shares.
#include "serverd/request_handler.h"

#include <linux/magic.h>
#include <sys/resource.h>
#include <unistd.h>
#include <spdlog/spdlog.h>
#include <sys/vfs.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "oramcore/base/fault_point.h"
#include "oramcore/base/random.h"
#include "oramcore/math/age_fill.h"
#include "oramcore/math/elem_packing.h"
#include "oramcore/math/field.h"
#include "oramcore/math/kernels.h"
#include "oramcore/math/random_elems.h"
#include "oramcore/math/shamir.h"
#include "oramcore/math/slot_digest.h"
#include "oramcore/tree/geometry.h"
#include "oramcore/wire/curve_keys.h"
#include "oramcore/wire/wire.h"
#include "serverd/backup_store.h"
#include "serverd/lease_file.h"
#include "serverd/lie.h"
#include "serverd/rebuild_masks.h"
#include "serverd/smp_frames.h"

namespace s3oram::serverd {

using field::Elem;
using Clock = std::chrono::steady_clock;

namespace {

std::string HexId(const wire::FsId& id) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (auto b : id) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

std::uint64_t Micros(Clock::duration d) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

// Shape limits shared by INIT and REBUILD_BEGIN (see HandleInit).
Status ValidateShape(const wire::StoreShape& s) {
  if (s.height < 1 || s.height > 40 || s.bucket_size < 1 || s.bucket_size > (1u << 16) ||
      s.elems_per_slot < 1 || s.elems_per_slot > (1u << 24)) {
    return Status::InvalidArgument("store shape out of range");
  }
  // A shape whose requests cannot fit the wire's vector limit is one no
  // client can use (ValidateParams refuses it on the client side), and
  // serving it would size buffers from it: up to (H+1) Z m elements per
  // RETRIEVE, 2^40 for Z = 2^16, m = 2^24. The limits are the client's:
  // the eviction matrices (H+1) 2 Z^2, the leaf SMP round 2 Z m, the
  // select vector (H+1) Z (u64 arithmetic: every factor is below 2^25).
  const std::uint64_t levels = std::uint64_t{s.height} + 1, Z = s.bucket_size;
  if (levels * 2 * Z * Z > wire::kMaxElems || 2 * Z * s.elems_per_slot > wire::kMaxElems ||
      levels * Z > wire::kMaxElems) {
    return Status::InvalidArgument(
        "store shape H=" + std::to_string(s.height) + " Z=" + std::to_string(s.bucket_size) +
        " m=" + std::to_string(s.elems_per_slot) + " needs messages beyond the wire limit of " +
        std::to_string(wire::kMaxElems) + " elements");
  }
  return Status::Ok();
}

// Raises the calling thread's nice value by `by` (on Linux nice is per
// thread), at most to 19. Lowering a priority needs no privilege; where it
// fails anyway, the eviction runs at the accesses' priority, as with 0.
void LowerThisThreadsPriority(std::uint32_t by) {
  if (by == 0) return;
  const auto tid = static_cast<id_t>(::gettid());
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, tid);
  if (now == -1 && errno != 0) {
    spdlog::warn("eviction priority: getpriority: {}", std::strerror(errno));
    return;
  }
  const int want = std::min(19, now + static_cast<int>(by));
  if (::setpriority(PRIO_PROCESS, tid, want) != 0) {
    spdlog::warn("eviction priority: setpriority to nice {}: {}", want, std::strerror(errno));
  }
}

// A CURVE public key (Z85 text, as in the configuration) as 32 bytes.
Result<rebuild::PublicKey> DecodePublicKey(const std::string& z85, const std::string& what) {
  S3ORAM_RETURN_IF_ERROR(CheckZ85Key(z85, what));
  rebuild::PublicKey out{};
  if (zmq_z85_decode(out.data(), z85.c_str()) == nullptr) {
    return Status::InvalidArgument(what + " is not valid Z85");
  }
  return out;
}

}  // namespace

struct RequestHandler::Impl {
  ServerConfig config;
  PeerExchange* peers = nullptr;
  std::size_t parties = 0;
  std::size_t threshold = 0;
  std::vector<std::uint32_t> peer_indices;  // ascending, the order PeerExchange::Await uses
  std::vector<Elem> lambda;                 // Lagrange weights at 0 over all parties
  std::unique_ptr<ShareStore> store;
  // The client-state backups beside the share file; open whenever store is.
  std::unique_ptr<BackupStore> backups;
  std::unique_ptr<boost::asio::thread_pool> pool;
  // The eviction's kernel threads: a pool of their own, at the lower CPU
  // priority of config.eviction_nice, so that the kernels of accesses
  // (`pool`, or the serving thread during an eviction) get the CPU first.
  std::unique_ptr<boost::asio::thread_pool> evict_pool;
  std::size_t threads = 1;
  // (eviction, attempt) whose shadow this process sealed; lets a duplicate
  // PREPARE (client resend) be answered without a new SMP run.
  std::optional<std::pair<std::uint64_t, std::uint32_t>> sealed;
  // A PREPARE checked and started by HandlePrepare whose computation has not
  // run yet (RunPrepare), and how the last one that ran ended. Only the
  // thread running RunPrepare touches them meanwhile: Server queues every
  // request that reads them (EVICT_*) until it is done.
  struct PrepareJob {
    wire::Header header;
    wire::EvictPrepareRequest req;
    std::vector<std::uint64_t> list;  // shadow buckets: u_1..u_H, s_1..s_H
    wire::StoreShape shape;
  };
  std::optional<PrepareJob> job;
  struct PrepareOutcome {
    std::uint64_t eviction = 0;
    std::uint32_t attempt = 0;
    Status status;
  };
  std::optional<PrepareOutcome> outcome;
  // Set from HandlePrepare until RunPrepare ends: a retrieval meanwhile runs
  // its kernel on its own thread instead of queueing behind the eviction's
  // kernel tasks (seconds each) in the pool.
  std::atomic<bool> computing{false};
  std::uint64_t max_epoch = 0;  // highest client epoch accepted by this process
  // The single-writer lease (persisted in the data dir) and when its holder
  // was last heard from (by this process; a restart counts as contact).
  LeaseRecord lease;
  Clock::time_point lease_last_seen = Clock::now();
  // Work counters since start (STATS); updated by the handlers below. The
  // PREPARE's own (prepare_*) are written under aside_mu, and STATS copies
  // the whole under it: a PREPARE may run on another thread.
  wire::StatsReply stats;
  // The PREPARE under way: written by the thread running it, read by the
  // one answering STATUS: always under aside_mu.
  mutable std::mutex aside_mu;
  struct PrepareProgress {
    bool active = false;
    std::uint64_t eviction = 0;
    std::uint32_t attempt = 0, round = 0, rounds = 0;
    wire::EvictPhase phase = wire::EvictPhase::kReading;
    Clock::time_point started;
  } progress;
  std::uint64_t last_retrieve_us = 0;  // the latest retrieval's own time (read + kernel)
  // Reused buffers for bucket reads (a path; an eviction's inputs).
  std::vector<Elem> path_buffer, source_buffer, target_buffer, sibling_buffer;

  // This server as the rebuild target K: what REBUILD_BEGIN asked for and how
  // far REBUILD_WRITE has come. Set exactly while store->rebuilding().
  struct RebuildTarget {
    std::uint64_t epoch = 0;
    std::uint64_t applied_seq = 0;
    std::uint64_t applied_evictions = 0;
    std::uint64_t next_bucket = 1;  // buckets below it have been written
  };
  std::optional<RebuildTarget> rebuild_target;
  // This server as a rebuild participant: the masks of the current session
  // (target, participants, nonce), derived once and reused for every range.
  // The seeds are Secrets (zeroed when the session is replaced or ends).
  struct MaskSession {
    std::uint32_t target = 0;
    std::vector<std::uint32_t> participants;
    wire::RebuildNonce nonce{};
    Elem lambda = 0;  // L_me(x_K) over the participants' points
    std::vector<rebuild::PairMask> pairs;
  };
  std::optional<MaskSession> mask_session;
  std::vector<Elem> mask_scratch, rebuild_sum;

  ~Impl() {
    if (pool) pool->join();
    if (evict_pool) evict_pool->join();
  }

  // Runs fn over [0, m) split in column ranges across `on` (pool or evict_pool).
  void ParallelColumns(boost::asio::thread_pool& on, std::size_t m,
                       const std::function<void(kernels::ColumnRange)>& fn) {
    const std::size_t parts = std::min<std::size_t>(threads, (m + 63) / 64);
    if (parts <= 1) {
      fn({0, m});
      return;
    }
    std::size_t chunk = (m + parts - 1) / parts;
    chunk = (chunk + 15) / 16 * 16;  // whole SIMD groups per thread
    std::size_t tasks = (m + chunk - 1) / chunk;
    std::latch done(static_cast<std::ptrdiff_t>(tasks));
    for (std::size_t t = 0; t < tasks; ++t) {
      kernels::ColumnRange r{t * chunk, std::min(m, (t + 1) * chunk)};
      boost::asio::post(on, [&fn, r, &done] {
        fn(r);
        done.count_down();
      });
    }
    done.wait();
  }

  // Every request that reads or changes the tree must come from the lease
  // holder: a client whose lease was taken over (--force) is fenced off even
  // if its epoch is newer than anything else this server saw.
  Status CheckHolder(const wire::Header& h) {
    S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
    if (!lease.held()) {
      return Status::LeaseHeld("no client holds this filesystem's lease (it was released): "
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

  std::uint64_t MsSince(Clock::time_point t) const {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count());
  }

  wire::LeaseReply LeaseState(bool granted) const {
    wire::LeaseReply r;
    r.granted = granted;
    r.holder_epoch = lease.holder_epoch;
    r.holder = lease.holder;
    r.highest_epoch = std::max(lease.highest_epoch, max_epoch);
    if (Lies("counters")) r.highest_epoch = UINT64_MAX;
    if (lease.held()) {
      const auto now_ms = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::system_clock::now().time_since_epoch())
              .count());
      r.held_ms = now_ms > lease.acquired_unix_ms ? now_ms - lease.acquired_unix_ms : 0;
      r.idle_ms = MsSince(lease_last_seen);
    }
    return r;
  }

  // ACQUIRE with the header's epoch: granted when the lease is free, already
  // this epoch's (a resend, or the holder renewing it), or `force` is set.
  // Otherwise a LeaseReply with granted = false names the holder: refusing is
  // an answer, not an error, so the client can say who holds it.
  Result<wire::Body> HandleLeaseAcquire(const wire::Header& h,
                                        const wire::LeaseAcquireRequest& req) {
    S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
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
    next.acquired_unix_ms = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::system_clock::now().time_since_epoch())
            .count());
    // Durable before the grant is acknowledged: a restarted server must still
    // fence the previous holder, and never grant this epoch again. (The
    // store's own epoch stays the last one that changed the tree, which is
    // how a client tells that its state file is stale.)
    next.highest_epoch = std::max(lease.highest_epoch, h.epoch);
    S3ORAM_RETURN_IF_ERROR(SaveLease(config.data_dir, next, config.sync));
    if (lease.held()) {
      spdlog::warn("lease of epoch {} taken over by epoch {} (forced)", lease.holder_epoch,
                   h.epoch);
    } else {
      spdlog::info("lease granted to epoch {}", h.epoch);
    }
    lease = next;
    max_epoch = h.epoch;
    lease_last_seen = Clock::now();
    return wire::Body{LeaseState(true)};
  }

  Result<wire::Body> HandleLeaseRelease(const wire::Header& h) {
    S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
    if (lease.held() && lease.holder_epoch == h.epoch) {
      LeaseRecord freed;
      freed.highest_epoch = lease.highest_epoch;
      S3ORAM_RETURN_IF_ERROR(SaveLease(config.data_dir, freed, config.sync));
      spdlog::info("lease of epoch {} released", h.epoch);
      lease = freed;
    }
    return wire::Body{LeaseState(false)};
  }

  Status CheckRequest(const wire::Header& h, bool needs_store) {
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

  wire::StatusReply MakeStatus() const {
    wire::StatusReply r;
    r.server_index = config.index;
    if (store && store->rebuilding()) {
      // Not live: a client must not take it for an initialised server.
      r.rebuilding = true;
      r.shape = store->meta().shape;
      r.epoch = rebuild_target ? rebuild_target->epoch : 0;
      r.share_file_bytes = store->file_bytes();
      r.allocated_bytes = store->allocated_bytes();
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
      r.prepared_eviction = running ? 0 : store->SealedEviction();
      r.share_file_bytes = store->file_bytes();
      r.allocated_bytes = store->allocated_bytes();
      r.peer_bytes_sent = peers->bytes_sent();
      if (Lies("counters")) r.epoch = r.applied_evictions = UINT64_MAX;
    }
    return r;
  }

  void SetProgress(std::uint32_t round, wire::EvictPhase phase) {
    const std::lock_guard lock(aside_mu);
    progress.round = round;
    progress.phase = phase;
  }

  // `r` with the progress of the PREPARE under way (caller holds aside_mu).
  // The share done is estimated from the round and its phase, each round
  // weighted alike: reading 5 %, kernels 55 %, SMP 20 %, peer wait 10 %,
  // combining and shadow writes 10 % (roughly their times at the defaults).
  wire::StatusReply WithProgress(wire::StatusReply r) const {
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

  Result<wire::Body> HandleInit(const wire::Header& h, const wire::InitRequest& req) {
    if (req.server_index != config.index) {
      return Status::InvalidArgument("this is server " + std::to_string(config.index) +
                                     ", not server " + std::to_string(req.server_index));
    }
    const auto& s = req.shape;
    S3ORAM_RETURN_IF_ERROR(ValidateShape(s));
    if (store && store->rebuilding()) {
      if (!req.overwrite) {
        return Status::AlreadyExists("server " + std::to_string(config.index) +
                                     " is being rebuilt; initialise with overwrite to abandon "
                                     "the rebuild");
      }
      store.reset();
      rebuild_target.reset();
    }
    if (store) {
      const ServerMeta& m = store->meta();
      if (m.fs_id == h.fs_id && m.shape == s && m.server_index == req.server_index) {
        return wire::Body{wire::InitReply{}};  // same request again: already done
      }
      if (!req.overwrite) {
        return Status::AlreadyExists("server " + std::to_string(config.index) +
                                     " already holds filesystem " + HexId(m.fs_id) +
                                     "; initialise with overwrite to replace it");
      }
      store.reset();
    }
    sealed.reset();
    outcome.reset();
    job.reset();
    ServerMeta meta;
    meta.fs_id = h.fs_id;
    meta.server_index = req.server_index;
    meta.shape = s;
    meta.epoch = h.epoch;
    max_epoch = h.epoch;
    backups.reset();
    S3ORAM_ASSIGN_OR_RETURN(store, ShareStore::Create(config.data_dir, meta, req.overwrite, config.sync));
    // A new filesystem starts without a holder (a replaced one's lease is void).
    S3ORAM_RETURN_IF_ERROR(SaveLease(config.data_dir, LeaseRecord{}, config.sync));
    lease = LeaseRecord{};
    // Backups of whatever filesystem this server held before are useless
    // (and could never be told apart from the new one's by the server).
    S3ORAM_ASSIGN_OR_RETURN(backups, BackupStore::Open(config.data_dir, config.sync));
    S3ORAM_RETURN_IF_ERROR(backups->RemoveAll());
    sealed.reset();
    mask_session.reset();
    peers->Reset();
    spdlog::info("initialised filesystem {} (H={} Z={} m={}, {} bytes logical)", HexId(h.fs_id),
                 s.height, s.bucket_size, s.elems_per_slot, store->file_bytes());
    return wire::Body{wire::InitReply{}};
  }

  Status CheckRetrieve(std::uint64_t leaf, const std::vector<Elem>& select) const {
    const auto& shape = store->meta().shape;
    TreeGeometry geo{shape.height, shape.bucket_size};
    if (!geo.is_leaf(leaf)) return Status::InvalidArgument("retrieve: leaf out of range");
    if (select.size() != geo.path_slots()) {
      return Status::InvalidArgument("retrieve: select vector has " +
                                     std::to_string(select.size()) + " entries, expected " +
                                     std::to_string(geo.path_slots()));
    }
    return Status::Ok();
  }

  Status CheckWriteRoot(std::uint32_t slot, const std::vector<Elem>& share) const {
    const auto& shape = store->meta().shape;
    if (slot >= shape.bucket_size) return Status::InvalidArgument("write_root: slot out of range");
    if (share.size() != shape.elems_per_slot) {
      return Status::InvalidArgument("write_root: share has " + std::to_string(share.size()) +
                                     " elements, expected " +
                                     std::to_string(shape.elems_per_slot));
    }
    return Status::Ok();
  }

  Result<wire::Body> HandleRetrieve(const wire::RetrieveRequest& req) {
    S3ORAM_RETURN_IF_ERROR(CheckRetrieve(req.leaf, req.select));
    return Retrieve(req.leaf, req.select);
  }

  // The path inner product for a checked (leaf, select).
  Result<wire::Body> Retrieve(std::uint64_t leaf, const std::vector<Elem>& select) {
    const auto& shape = store->meta().shape;
    TreeGeometry geo{shape.height, shape.bucket_size};
    const auto t0 = Clock::now();
    const std::size_t bucket = store->bucket_elems();
    const std::size_t Z = shape.bucket_size;
    path_buffer.resize(bucket * geo.levels());
    std::vector<const Elem*> buckets;
    // A bucket never written is a hole of the share file: its shares read
    // as zeros and add nothing to the inner product, so it is left out
    // (with its part of the select vector) instead of being read, which on
    // a young filesystem would fill the page cache with zero pages of most
    // of the tree. The answer is the same either way. The root is always
    // read: its last slot may have been written a moment ago, and a
    // filesystem need not report data that is still only in the page
    // cache; every other bucket is written by an eviction's commit, which
    // is on disk before any retrieval runs.
    std::vector<Elem> written_select;
    std::vector<std::uint64_t> written;  // bucket numbers behind `buckets`
    bool skipped = false;
    for (std::uint32_t l = 0; l <= geo.height; ++l) {
      const std::uint64_t b = geo.BucketOnPath(leaf, l);
      std::vector<bool> hole{false};
      if (l > 0) {
        S3ORAM_ASSIGN_OR_RETURN(hole, store->Holes(b, 1));
      }
      if (hole.at(0)) {
        // Left out as zeros: its digests must say zeros too, or the disk lost
        // data that was written there.
        const auto d = store->Digests(b);
        for (std::size_t s = 0; s < d.size(); ++s) {
          if (d[s] != digest::SlotDigest{}) {
            return store->DamagedSlot(b, s, "it reads as never written, but was written");
          }
        }
        skipped = true;
        continue;
      }
      std::span<Elem> scratch(path_buffer.data() + l * bucket, bucket);
      S3ORAM_ASSIGN_OR_RETURN(const Elem* view, store->BucketForRead(b, scratch));
      buckets.push_back(view);
      written.push_back(b);
      written_select.insert(written_select.end(), select.begin() + static_cast<std::ptrdiff_t>(l * Z),
                            select.begin() + static_cast<std::ptrdiff_t>((l + 1) * Z));
    }
    const auto t_read = Clock::now();
    const std::size_t m = shape.elems_per_slot;
    wire::RetrieveReply reply;
    reply.answer.assign(m, 0);
    if (!buckets.empty()) {
      const std::vector<Elem>& sel = skipped ? written_select : select;
      auto product = [&](kernels::ColumnRange r) {
        kernels::PathInnerProduct(buckets, Z, m, sel, reply.answer.data(), r);
      };
      if (computing.load()) {
        product({0, m});
      } else {
        ParallelColumns(*pool, m, product);
      }
      S3ORAM_RETURN_IF_ERROR(CheckAnswer(written, buckets, sel, reply.answer));
      if (Lies("retrieve") && !reply.answer.empty()) {
        reply.answer[0] = field::Add(reply.answer[0], 1);
      }
    }
    const auto t_end = Clock::now();
    ++stats.retrieves;
    stats.retrieve_read_us += Micros(t_read - t0);
    stats.retrieve_kernel_us += Micros(t_end - t_read);
    last_retrieve_us = Micros(t_end - t0);
    spdlog::trace("retrieve leaf {}: {:.2f} ms", leaf,
                  std::chrono::duration<double, std::milli>(t_end - t0).count());
    return wire::Body{std::move(reply)};
  }

  // The answer is sum_q sel[q] * slot_q over the path, so by linearity its
  // digest must be the same combination of the slots' stored digests: one
  // pass over m elements checks every slot the answer used (a damaged slot
  // with a non-zero select share shows; one with a zero share did not change
  // the answer). On a mismatch the buckets are checked slot by slot to name the
  // damaged one.
  Status CheckAnswer(const std::vector<std::uint64_t>& path_buckets,
                     const std::vector<const Elem*>& views, std::span<const Elem> sel,
                     std::span<const Elem> answer) const {
    const std::size_t Z = store->meta().shape.bucket_size;
    std::vector<digest::SlotDigest> stored;
    stored.reserve(path_buckets.size() * Z);
    for (std::uint64_t b : path_buckets) {
      const auto d = store->Digests(b);
      stored.insert(stored.end(), d.begin(), d.end());
    }
    digest::SlotDigest got{};
    if (store->digest_key().Digest(answer, &got) && got == digest::Combine(sel, stored)) {
      return Status::Ok();
    }
    const std::size_t bucket = store->bucket_elems();
    for (std::size_t i = 0; i < path_buckets.size(); ++i) {
      S3ORAM_RETURN_IF_ERROR(store->VerifyBuckets(path_buckets[i], {views[i], bucket}));
    }
    return Status::Damaged("server " + std::to_string(config.index) +
                           ": a retrieval answer failed its digest check although every slot "
                           "of the path verifies (memory or CPU fault?); refusing to answer");
  }

  // Root write, then the retrieval over the tree that holds it; the retrieval
  // runs while the root write's fdatasync is in flight, and the reply waits
  // for both. Everything is checked before anything is written.
  Result<wire::Body> HandleRetrieveWriteRoot(const wire::Header& h,
                                             const wire::RetrieveWriteRootRequest& req) {
    S3ORAM_RETURN_IF_ERROR(CheckWriteRoot(req.slot, req.share));
    S3ORAM_RETURN_IF_ERROR(CheckRetrieve(req.leaf, req.select));
    const auto t0 = Clock::now();
    std::optional<wire::Body> answer;
    S3ORAM_RETURN_IF_ERROR(store->WriteSlot(1, req.slot, req.share, h.seq, h.epoch, [&]() -> Status {
      S3ORAM_ASSIGN_OR_RETURN(wire::Body b, Retrieve(req.leaf, req.select));
      answer = std::move(b);
      return Status::Ok();
    }));
    ++stats.root_writes;
    // The root write's share of the time: all of it but the retrieval's own.
    const std::uint64_t total = Micros(Clock::now() - t0);
    const std::uint64_t retrieval = last_retrieve_us;
    stats.root_write_us += total > retrieval ? total - retrieval : 0;
    spdlog::debug("retrieve+write_root seq {} slot {}", h.seq, req.slot);
    return std::move(*answer);
  }

  Result<wire::Body> HandleWriteRoot(const wire::Header& h, const wire::WriteRootRequest& req) {
    S3ORAM_RETURN_IF_ERROR(CheckWriteRoot(req.slot, req.share));
    const auto t0 = Clock::now();
    S3ORAM_RETURN_IF_ERROR(store->WriteSlot(1, req.slot, req.share, h.seq, h.epoch));
    ++stats.root_writes;
    stats.root_write_us += Micros(Clock::now() - t0);
    spdlog::debug("write_root seq {} slot {}", h.seq, req.slot);
    return wire::Body{wire::WriteRootReply{}};
  }

  // EVICT_PREPARE (background eviction): checks the request, copies the root
  // it evicts aside (SnapshotRoot, durable), opens the shadow and leaves the
  // computation to RunPrepare; the reply (EVICT_STARTED) goes out at once, so
  // the client's next root writes may overwrite the live root. A duplicate
  // of the attempt under way or finished is answered the same way.
  Result<wire::Body> HandlePrepare(const wire::Header& h, const wire::EvictPrepareRequest& req) {
    const ServerMeta& meta = store->meta();
    spdlog::debug("prepare seq {} eviction {} attempt {} (applied {})", h.seq, req.eviction,
                  req.attempt, meta.applied_evictions);
    const wire::Body started{wire::EvictStartedReply{req.eviction, req.attempt}};
    if (req.eviction < meta.applied_evictions) return started;  // already committed here
    if (req.eviction > meta.applied_evictions) {
      return Status::FailedPrecondition("cannot prepare eviction " + std::to_string(req.eviction) +
                                        ": this server has applied " +
                                        std::to_string(meta.applied_evictions));
    }
    const auto same = std::make_pair(req.eviction, req.attempt);
    if ((job && std::make_pair(job->req.eviction, job->req.attempt) == same) ||
        (outcome && std::make_pair(outcome->eviction, outcome->attempt) == same &&
         outcome->status.ok()) ||
        (sealed && *sealed == same && store->SealedEviction() == req.eviction + 1)) {
      return started;
    }
    const auto shape = meta.shape;
    const TreeGeometry geo{shape.height, shape.bucket_size};
    const std::size_t Z = shape.bucket_size, H = shape.height;
    const std::size_t step = 2 * Z * Z;
    if (req.leaf != geo.EvictionLeaf(req.eviction)) {
      return Status::InvalidArgument("evict: leaf " + std::to_string(req.leaf) +
                                     " is not the path of eviction " + std::to_string(req.eviction));
    }
    if (req.matrices.size() != (H + 1) * step) {
      return Status::InvalidArgument("evict: " + std::to_string(req.matrices.size()) +
                                     " matrix entries, expected " + std::to_string((H + 1) * step));
    }
    // Shadow buckets: u_1..u_H, then s_1..s_H.
    PrepareJob j;
    j.header = h;
    j.shape = shape;
    for (std::uint32_t k = 1; k <= H; ++k) j.list.push_back(geo.BucketOnPath(req.leaf, k));
    for (std::uint32_t k = 1; k <= H; ++k) j.list.push_back(TreeGeometry::Sibling(j.list[k - 1]));
    sealed.reset();
    outcome.reset();
    // The root as the eviction reads it, kept until it commits: root writes
    // that follow change only the live root. A retried attempt (after a
    // restart too) reads the same snapshot.
    S3ORAM_RETURN_IF_ERROR(store->SnapshotRoot(req.eviction));
    FaultPoint("server.evict_prepare.after_snapshot");
    S3ORAM_RETURN_IF_ERROR(store->BeginShadow(req.eviction, req.attempt, j.list));
    j.req.eviction = req.eviction;
    j.req.attempt = req.attempt;
    j.req.leaf = req.leaf;
    j.req.matrices = req.matrices;
    {
      const std::lock_guard lock(aside_mu);
      progress = PrepareProgress{true,
                                 req.eviction,
                                 req.attempt,
                                 1,
                                 static_cast<std::uint32_t>(H),
                                 wire::EvictPhase::kReading,
                                 Clock::now()};
    }
    job = std::move(j);
    computing.store(true);
    return started;
  }

  // The PREPARE left by HandlePrepare: the SMP rounds into the shadow, then
  // its seal. Runs on a thread of the caller's (Server's) while the thread
  // that handles requests serves only those ServedDuringPrepare admits, so it
  // reads and writes nothing they touch: not the live root (the snapshot),
  // not meta() (the job holds the shape), stats under aside_mu.
  void RunPrepare() {
    if (!job) return;
    // Runs on a thread of its own (Server: one per PREPARE), beside the
    // serving thread that answers the next round's accesses.
    LowerThisThreadsPriority(config.eviction_nice);
    PrepareJob j = std::move(*job);
    job.reset();
    Status st = ComputePrepare(j);
    if (st.ok()) {
      sealed = std::make_pair(j.req.eviction, j.req.attempt);
    } else {
      spdlog::warn("eviction {} attempt {} failed: {}", j.req.eviction, j.req.attempt,
                   st.ToString());
    }
    outcome = PrepareOutcome{j.req.eviction, j.req.attempt, std::move(st)};
    computing.store(false);
  }

  // EVICT_RESULT: the outcome of the PREPARE attempt asked for. In process
  // (no thread runs PREPAREs, e.g. the fuzz harness) a pending one runs here.
  Result<wire::Body> HandleResult(const wire::EvictResultRequest& req) {
    const wire::Body done{wire::EvictPrepareReply{req.eviction}};
    if (req.eviction < store->meta().applied_evictions) return done;  // committed here
    const auto same = std::make_pair(req.eviction, req.attempt);
    if (job && std::make_pair(job->req.eviction, job->req.attempt) == same) RunPrepare();
    if (outcome && std::make_pair(outcome->eviction, outcome->attempt) == same) {
      if (!outcome->status.ok()) return outcome->status;
      return done;
    }
    if (sealed && *sealed == same && store->SealedEviction() == req.eviction + 1) return done;
    return Status::FailedPrecondition(
        "eviction " + std::to_string(req.eviction) + " attempt " + std::to_string(req.attempt) +
        " is neither under way nor prepared on this server (restarted, or superseded): prepare "
        "it again");
  }

  Status ComputePrepare(PrepareJob& j) {
    // The exchange's round buffers are freed when this PREPARE ends, however
    // it ends.
    struct TrimPeers {
      PeerExchange* peers;
      ~TrimPeers() { peers->Trim(); }
    } trim_peers{peers};
    struct EndProgress {
      Impl* impl;
      ~EndProgress() {
        const std::lock_guard lock(impl->aside_mu);
        impl->progress.active = false;
      }
    } end_progress{this};
    const wire::Header& h = j.header;
    const wire::EvictPrepareRequest& req = j.req;
    const std::vector<std::uint64_t>& list = j.list;
    const std::size_t Z = j.shape.bucket_size, m = j.shape.elems_per_slot, H = j.shape.height;
    const std::size_t step = 2 * Z * Z;
    const std::size_t bucket = Z * m;
    source_buffer.resize(bucket);
    target_buffer.resize(bucket);
    sibling_buffer.resize(bucket);
    // The root as it was when the PREPARE began (checked against its digests);
    // later sources are the previous step's output.
    S3ORAM_RETURN_IF_ERROR(store->ReadRootSnapshot(req.eviction, source_buffer));
    const Elem* source = source_buffer.data();
    std::vector<Elem> prev;  // u_{k-1} after step k-1
    // Every other bucket the eviction reads is checked against its digests
    // first too: a damaged slot must not be mixed into the new buckets (where
    // no digest could catch it any more).
    std::vector<Elem> product, combined;
    SmpFrames smp;  // this round's frames and own share, reused by the next

    const std::uint32_t me = config.index;
    // Phase timings for the debug log: kernels, SMP split/combine, waiting for
    // peers, shadow writes.
    double t_kernel = 0, t_smp = 0, t_wait = 0, t_shadow = 0;
    auto since = [](Clock::time_point t0) {
      return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    };
    const auto t_start = Clock::now();
    for (std::uint32_t k = 1; k <= H; ++k) {
      const std::uint32_t round = k - 1;
      SetProgress(k, wire::EvictPhase::kReading);
      // With a delay (name~ms): a first round that lasts, for the client's
      // pacing by progress (BackgroundEvictionTest).
      if (k == 1) FaultPoint("server.evict_prepare.first_round");
      auto t0 = Clock::now();
      // The source's digests are known: the root's stored ones (verified
      // above), or those of the previous step's output (put from `prev`).
      if (k < H) {
        // The sibling s_k is overwritten without being read (the eviction
        // that last passed through it emptied it). Its stored slots are
        // checked first all the same: damage there stops this eviction
        // (fail-stop) instead of vanishing under the copy, where neither
        // scrub nor the rebuild of this server would find it any more.
        S3ORAM_ASSIGN_OR_RETURN(const Elem* old_sibling,
                                store->BucketForRead(list[H + k - 1], sibling_buffer));
        S3ORAM_RETURN_IF_ERROR(store->VerifyBuckets(list[H + k - 1], {old_sibling, bucket}));
        S3ORAM_RETURN_IF_ERROR(store->PutShadowBucket(
            H + k - 1, {source, bucket},
            k == 1 ? store->RootSnapshotDigests() : store->ShadowBucketDigests(k - 2)));
      }
      t_shadow += since(t0);
      SetProgress(k, wire::EvictPhase::kKernels);
      t0 = Clock::now();
      const bool leaf_round = (k == H);
      product.resize(leaf_round ? 2 * bucket : bucket);
      std::span<const Elem> mk(req.matrices.data() + (k - 1) * step, step);
      S3ORAM_ASSIGN_OR_RETURN(const Elem* target, store->BucketForRead(list[k - 1], target_buffer));
      S3ORAM_RETURN_IF_ERROR(store->VerifyBuckets(list[k - 1], {target, bucket}));
      ParallelColumns(*evict_pool, m, [&](kernels::ColumnRange r) {
        kernels::EvictProduct(source, target, Z, m, mk, product.data(), r);
      });
      if (leaf_round) {
        std::span<const Elem> ms(req.matrices.data() + H * step, step);
        S3ORAM_ASSIGN_OR_RETURN(const Elem* sib, store->BucketForRead(list[2 * H - 1], sibling_buffer));
        S3ORAM_RETURN_IF_ERROR(store->VerifyBuckets(list[2 * H - 1], {sib, bucket}));
        ParallelColumns(*evict_pool, m, [&](kernels::ColumnRange r) {
          kernels::EvictProduct(source, sib, Z, m, ms, product.data() + bucket, r);
        });
      }
      t_kernel += since(t0);
      SetProgress(k, wire::EvictPhase::kSmp);
      t0 = Clock::now();
      // SMP: re-share lambda_me * product with degree t straight into the
      // peers' frames; keep our own part.
      if (Lies("smp-consistent") && !product.empty()) product[0] = field::Add(product[0], 1);
      const SmpRound smp_round{req.eviction, req.attempt, round};
      const wire::SmpShares fields{req.eviction, req.attempt, round, me, {}};
      SplitIntoFrames(h, fields, product, lambda[me], threshold, parties, me, smp);
      if (Lies("smp-inconsistent") && !peer_indices.empty() && !product.empty()) {
        // The first share to one peer, off by one: unpack its first 8, repack.
        std::vector<std::uint8_t>& frame = smp.frames[peer_indices[0]];
        const std::size_t k8 = std::min<std::size_t>(8, product.size());
        Elem first[8] = {};
        std::uint8_t* at = frame.data() + smp.shares_offset;
        std::string ignored;
        if (wire::UnpackElems({at, wire::PackedElemBytes(k8)}, {first, k8}, &ignored)) {
          first[0] = field::Add(first[0], 1);
          (void)wire::PackElems({first, k8}, at);
        }
      }
      const std::vector<Elem>& mine = smp.own;
      S3ORAM_RETURN_IF_ERROR(peers->Send(smp.frames));
      // Mid-PREPARE: this server's round shares are out, its peers wait for
      // the next round that never comes.
      FaultPoint("server.evict_prepare.mid_rounds");
      t_smp += since(t0);
      SetProgress(k, wire::EvictPhase::kPeerWait);
      t0 = Clock::now();
      S3ORAM_ASSIGN_OR_RETURN(auto from_peers, peers->Await(smp_round));
      t_wait += since(t0);
      SetProgress(k, wire::EvictPhase::kShadow);
      t0 = Clock::now();
      // SmpCombine reads product.size() elements from every vector: check each
      // peer's length first (an exchange may hand over anything a peer sent).
      if (from_peers.size() != peer_indices.size()) {
        return Status::Protocol("SMP round " + std::to_string(round) + ": shares from " +
                                std::to_string(from_peers.size()) + " peers, expected " +
                                std::to_string(peer_indices.size()));
      }
      std::vector<const Elem*> received{mine.data()};
      for (std::size_t i = 0; i < from_peers.size(); ++i) {
        if (from_peers[i].size() != product.size()) {
          return Status::Protocol("peer " + std::to_string(peer_indices[i]) + " sent " +
                                  std::to_string(from_peers[i].size()) +
                                  " SMP shares for round " + std::to_string(round) +
                                  ", expected " + std::to_string(product.size()));
        }
        received.push_back(from_peers[i].data());
      }
      combined.resize(product.size());
      shamir::SmpCombine(received, product.size(), combined.data());
      if (Lies("shadow") && !combined.empty()) combined[0] = field::Add(combined[0], 1);
      peers->Release(smp_round);
      t_smp += since(t0);
      t0 = Clock::now();
      S3ORAM_RETURN_IF_ERROR(store->PutShadowBucket(k - 1, {combined.data(), bucket}));
      if (leaf_round) {
        S3ORAM_RETURN_IF_ERROR(store->PutShadowBucket(2 * H - 1, {combined.data() + bucket, bucket}));
      }
      t_shadow += since(t0);
      // u_k is the first bucket of `combined`; taking its buffer instead of a
      // copy (the next round's `combined` reuses prev's).
      prev.swap(combined);
      source = prev.data();
    }
    SetProgress(static_cast<std::uint32_t>(H), wire::EvictPhase::kSeal);
    auto t_seal = Clock::now();
    FaultPoint("server.evict_prepare.before_seal");
    S3ORAM_RETURN_IF_ERROR(store->SealShadow());
    FaultPoint("server.evict_prepare.after_seal");
    const double seal_ms = since(t_seal);
    const std::lock_guard lock(aside_mu);
    ++stats.prepares;
    stats.prepare_kernel_us += static_cast<std::uint64_t>(t_kernel * 1000);
    stats.prepare_smp_us += static_cast<std::uint64_t>(t_smp * 1000);
    stats.prepare_peer_wait_us += static_cast<std::uint64_t>(t_wait * 1000);
    stats.prepare_shadow_us += static_cast<std::uint64_t>(t_shadow * 1000);
    stats.prepare_seal_us += static_cast<std::uint64_t>(seal_ms * 1000);
    spdlog::debug("eviction {} attempt {} prepared in {:.1f} ms: kernels {:.1f}, smp {:.1f}, "
                  "peer wait {:.1f}, shadow {:.1f}, seal {:.1f}",
                  req.eviction, req.attempt, since(t_start), t_kernel, t_smp, t_wait, t_shadow,
                  seal_ms);
    return Status::Ok();
  }

  Result<wire::Body> HandleCommit(const wire::Header& h, const wire::EvictCommitRequest& req) {
    const auto t0 = Clock::now();
    FaultPoint("server.evict_commit.before");
    S3ORAM_RETURN_IF_ERROR(store->Commit(req.eviction, h.seq, h.epoch));
    const auto took = Clock::now() - t0;
    ++stats.commits;
    stats.commit_us += Micros(took);
    spdlog::debug("commit seq {}: eviction {} applied in {:.1f} ms", h.seq, req.eviction,
                  std::chrono::duration<double, std::milli>(took).count());
    sealed.reset();
    return wire::Body{wire::EvictCommitReply{store->meta().applied_evictions}};
  }

  // ---- Server rebuild (docs/ARCHITECTURE.md, "Rebuilding a lost server").

  // REBUILD_BEGIN, on the target K: replace whatever is here by an empty,
  // not-yet-live store of the header's filesystem.
  Result<wire::Body> HandleRebuildBegin(const wire::Header& h,
                                        const wire::RebuildBeginRequest& req) {
    if (req.server_index != config.index) {
      return Status::InvalidArgument("rebuild: this is server " + std::to_string(config.index) +
                                     ", not server " + std::to_string(req.server_index));
    }
    S3ORAM_RETURN_IF_ERROR(ValidateShape(req.shape));
    if (store && !store->rebuilding()) {
      const ServerMeta& m = store->meta();
      if (!req.force) {
        return Status::AlreadyExists(
            "rebuild: server " + std::to_string(config.index) + " holds a live store of " +
            (m.fs_id == h.fs_id ? std::string("this filesystem") : "filesystem " + HexId(m.fs_id)) +
            " (" + std::to_string(m.applied_evictions) +
            " evictions applied); refusing to replace it without force (s3oram rebuild --force)");
      }
      // Forced, the store is replaced even if it reports a newer epoch than
      // the rebuild's: that epoch is this server's word alone. The rebuild's
      // client holds the lease of t + 1 other servers under an epoch above
      // what they agree on (oramcore/protocol/counter_agreement.h), so it is
      // not a client they fenced off; and a lease record or store header
      // forged to the last epoch must stay repairable by this rebuild.
      if (m.fs_id == h.fs_id && h.epoch < std::max(max_epoch, m.epoch)) {
        spdlog::warn("forced rebuild under epoch {} replaces a store that reports epoch {}",
                     h.epoch, std::max(max_epoch, m.epoch));
      }
    }
    store.reset();  // releases the directory lock before the new store takes it
    rebuild_target.reset();
    mask_session.reset();
    sealed.reset();
    // An outcome (or a pending job) belongs to the store it was computed on:
    // a rebuilt store must not answer EVICT_RESULT with the old one's damage.
    outcome.reset();
    job.reset();
    peers->Reset();
    ServerMeta meta;
    meta.fs_id = h.fs_id;
    meta.server_index = config.index;
    meta.shape = req.shape;
    meta.epoch = h.epoch;
    meta.applied_seq = req.applied_seq;
    meta.applied_evictions = req.applied_evictions;
    S3ORAM_ASSIGN_OR_RETURN(store,
                            ShareStore::CreateForRebuild(config.data_dir, meta, config.sync));
    // The rebuilt store starts without a holder (a replaced store's lease is
    // void) and without backups (the next clean unmount writes one; restores
    // meanwhile use the other servers' shares).
    S3ORAM_RETURN_IF_ERROR(SaveLease(config.data_dir, LeaseRecord{}, config.sync));
    lease = LeaseRecord{};
    backups.reset();
    S3ORAM_ASSIGN_OR_RETURN(backups, BackupStore::Open(config.data_dir, config.sync));
    S3ORAM_RETURN_IF_ERROR(backups->RemoveAll());
    rebuild_target = RebuildTarget{h.epoch, req.applied_seq, req.applied_evictions, 1};
    max_epoch = h.epoch;
    spdlog::info("rebuilding filesystem {} (H={} Z={} m={}, {} buckets) from the other servers",
                 HexId(h.fs_id), req.shape.height, req.shape.bucket_size,
                 req.shape.elems_per_slot, store->num_buckets());
    return wire::Body{wire::RebuildBeginReply{}};
  }

  // The rebuild target's checks for REBUILD_WRITE / REBUILD_FINISH.
  Status CheckRebuildTarget(const wire::Header& h) const {
    if (!store || !store->rebuilding() || !rebuild_target) {
      return Status::FailedPrecondition("rebuild: server " + std::to_string(config.index) +
                                        " is not being rebuilt (send REBUILD_BEGIN first)");
    }
    if (h.fs_id != store->meta().fs_id) {
      return Status::FailedPrecondition("rebuild: request for filesystem " + HexId(h.fs_id) +
                                        " but this server is rebuilding " +
                                        HexId(store->meta().fs_id));
    }
    if (h.epoch < rebuild_target->epoch) {
      return Status::FailedPrecondition("fenced: request epoch " + std::to_string(h.epoch) +
                                        " is older than the rebuild's epoch " +
                                        std::to_string(rebuild_target->epoch));
    }
    return Status::Ok();
  }

  // Checks a bucket range [first, first + count) against the store; `elems`
  // is the number of elements one message would carry for it.
  Status CheckRange(std::uint64_t first, std::uint64_t count, const char* what) const {
    const std::uint64_t n = store->num_buckets();
    if (first < 1 || count < 1 || first > n || count > n - first + 1) {
      return Status::InvalidArgument(std::string(what) + ": bucket range " +
                                     std::to_string(first) + " + " + std::to_string(count) +
                                     " is outside 1.." + std::to_string(n));
    }
    if (count * store->bucket_elems() > wire::kMaxElems) {
      return Status::InvalidArgument(std::string(what) + ": " + std::to_string(count) +
                                     " buckets exceed one message's element limit");
    }
    return Status::Ok();
  }

  // Derives (or reuses) the masks of a REBUILD_READ session. The CURVE secret
  // key is read from its file for this and zeroed on return; only the pair
  // seeds (Secrets) are kept, for the session's later ranges.
  Status PrepareMasks(const wire::RebuildReadRequest& req) {
    if (mask_session && mask_session->target == req.target &&
        mask_session->participants == req.participants && mask_session->nonce == req.nonce) {
      return Status::Ok();
    }
    mask_session.reset();
    MaskSession ms;
    ms.target = req.target;
    ms.participants = req.participants;
    ms.nonce = req.nonce;
    std::vector<Elem> xs;
    std::size_t mine = 0;
    for (std::size_t i = 0; i < req.participants.size(); ++i) {
      xs.push_back(shamir::PartyX(req.participants[i]));
      if (req.participants[i] == config.index) mine = i;
    }
    S3ORAM_ASSIGN_OR_RETURN(auto lag, shamir::LagrangeAt(xs, shamir::PartyX(req.target)));
    ms.lambda = lag[mine];
    S3ORAM_ASSIGN_OR_RETURN(CurveKeypair keys, LoadCurveKeypair(config.secret_key_file));
    S3ORAM_ASSIGN_OR_RETURN(Secret own_secret, DecodeSecretKey(keys));
    S3ORAM_ASSIGN_OR_RETURN(rebuild::PublicKey own_public,
                            DecodePublicKey(keys.public_key, "this server's public key"));
    rebuild::SessionNonce nonce{};
    std::copy(req.nonce.begin(), req.nonce.end(), nonce.begin());
    for (std::uint32_t j : req.participants) {
      if (j == config.index) continue;
      const PeerConfig* peer = nullptr;
      for (const auto& p : config.peers) {
        if (p.index == j) peer = &p;
      }
      if (peer == nullptr) {
        return Status::InvalidArgument("rebuild: participant " + std::to_string(j) +
                                       " is not a configured peer of server " +
                                       std::to_string(config.index));
      }
      S3ORAM_ASSIGN_OR_RETURN(
          rebuild::PublicKey peer_public,
          DecodePublicKey(peer->public_key, "public key of peer " + std::to_string(j)));
      S3ORAM_ASSIGN_OR_RETURN(Secret seed,
                              rebuild::PairSeed(own_secret, own_public, peer_public, nonce));
      ms.pairs.push_back(rebuild::PairMask{std::move(seed), config.index < j});
    }
    mask_session = std::move(ms);
    return Status::Ok();
  }

  // REBUILD_READ, on a survivor: masked Lagrange terms for a bucket range.
  Result<wire::Body> HandleRebuildRead(const wire::RebuildReadRequest& req) {
    if (req.target >= parties) {
      return Status::InvalidArgument("rebuild: target server " + std::to_string(req.target) +
                                     " out of range for " + std::to_string(parties) + " parties");
    }
    if (req.participants.size() != threshold + 1) {
      return Status::InvalidArgument("rebuild: " + std::to_string(req.participants.size()) +
                                     " participants, expected t + 1 = " +
                                     std::to_string(threshold + 1));
    }
    bool me_in = false;
    for (std::size_t i = 0; i < req.participants.size(); ++i) {
      const std::uint32_t p = req.participants[i];
      if (p >= parties) {
        return Status::InvalidArgument("rebuild: participant " + std::to_string(p) +
                                       " out of range");
      }
      if (i > 0 && p <= req.participants[i - 1]) {
        return Status::InvalidArgument("rebuild: participants must be distinct and ascending");
      }
      if (p == req.target) {
        return Status::InvalidArgument(
            "rebuild: the target server " + std::to_string(req.target) +
            " is among the participants; a lost server cannot contribute to its own rebuild");
      }
      me_in |= p == config.index;
    }
    if (!me_in) {
      return Status::InvalidArgument("rebuild: this server (" + std::to_string(config.index) +
                                     ") is not among the participants");
    }
    if (req.first_bucket == 0) return RebuildReadRootSnapshot(req);
    S3ORAM_RETURN_IF_ERROR(CheckRange(req.first_bucket, req.count, "rebuild read"));
    S3ORAM_RETURN_IF_ERROR(PrepareMasks(req));
    const MaskSession& ms = *mask_session;

    std::vector<bool> holes(req.count, false);
    if (!req.dense) {
      S3ORAM_ASSIGN_OR_RETURN(holes, store->Holes(req.first_bucket, req.count));
    }
    wire::RebuildReadReply reply;
    reply.first_bucket = req.first_bucket;
    reply.holes.resize(req.count);
    std::size_t written = 0;
    for (std::size_t i = 0; i < req.count; ++i) {
      reply.holes[i] = holes[i] ? 1 : 0;
      written += holes[i] ? 0 : 1;
      if (holes[i]) {
        const auto d = store->Digests(req.first_bucket + i);
        for (std::size_t s = 0; s < d.size(); ++s) {
          if (d[s] != digest::SlotDigest{}) {
            return store->DamagedSlot(req.first_bucket + i, s,
                                      "it reads as never written, but was written");
          }
        }
      }
    }
    const std::size_t be = store->bucket_elems();
    reply.contribution.resize(written * be);
    // One pread per run of consecutive written buckets, straight into the reply.
    std::size_t out = 0;
    for (std::size_t i = 0; i < req.count;) {
      if (holes[i]) {
        ++i;
        continue;
      }
      std::size_t j = i;
      while (j < req.count && !holes[j]) ++j;
      std::span<Elem> run(reply.contribution.data() + out * be, (j - i) * be);
      S3ORAM_RETURN_IF_ERROR(store->ReadBuckets(req.first_bucket + i, j - i, run));
      // A damaged source slot would be rebuilt into the target as a
      // consistent wrong sharing, beyond any later check: refuse instead.
      S3ORAM_RETURN_IF_ERROR(store->VerifyBuckets(req.first_bucket + i, run));
      out += j - i;
      i = j;
    }
    // c = L_me(x_K) * s + sum of this server's pair masks, bucket by bucket (the
    // PRG is keyed per bucket number, so every participant lines up).
    out = 0;
    for (std::size_t i = 0; i < req.count; ++i) {
      if (holes[i]) continue;
      std::span<Elem> c(reply.contribution.data() + out * be, be);
      for (Elem& e : c) e = field::Mul(ms.lambda, e);
      rebuild::ApplyMasks(ms.pairs, req.first_bucket + i, c, mask_scratch);
      ++out;
    }
    spdlog::debug("rebuild read for server {}: buckets {}..{} ({} written)", req.target,
                  req.first_bucket, req.first_bucket + req.count - 1, written);
    return wire::Body{std::move(reply)};
  }

  // REBUILD_READ of "bucket 0": this server's share of the root snapshot of
  // the eviction under way (root.bin), masked as a bucket is. Without one,
  // FailedPrecondition (the rebuild then has none to carry over).
  Result<wire::Body> RebuildReadRootSnapshot(const wire::RebuildReadRequest& req) {
    if (req.count != 1) {
      return Status::InvalidArgument("rebuild read: the root snapshot (bucket 0) is read alone");
    }
    const std::uint64_t eviction = store->meta().applied_evictions;
    if (store->RootSnapshotEviction() != eviction + 1) {
      return Status::FailedPrecondition("rebuild read: no root snapshot of eviction " +
                                        std::to_string(eviction) + " here");
    }
    S3ORAM_RETURN_IF_ERROR(PrepareMasks(req));
    const MaskSession& ms = *mask_session;
    wire::RebuildReadReply reply;
    reply.first_bucket = 0;
    reply.holes = {0};
    reply.contribution.resize(store->bucket_elems());
    // Checked against its digests: damage must not be rebuilt into the target.
    S3ORAM_RETURN_IF_ERROR(store->ReadRootSnapshot(eviction, reply.contribution));
    for (Elem& e : reply.contribution) e = field::Mul(ms.lambda, e);
    rebuild::ApplyMasks(ms.pairs, 0, reply.contribution, mask_scratch);
    spdlog::debug("rebuild read for server {}: the root snapshot of eviction {}", req.target,
                  eviction);
    return wire::Body{std::move(reply)};
  }

  // REBUILD_WRITE of "bucket 0": the target's root snapshot for the eviction
  // under way (the survivors' applied_evictions), from the masked shares.
  Result<wire::Body> RebuildWriteRootSnapshot(const wire::RebuildWriteRequest& req) {
    const std::size_t be = store->bucket_elems();
    if (req.holes != std::vector<std::uint8_t>{0} || req.contributions.size() != threshold + 1) {
      return Status::InvalidArgument("rebuild write: the root snapshot is one bucket from t + 1 "
                                     "participants");
    }
    std::vector<const Elem*> parts;
    for (const auto& c : req.contributions) {
      if (c.size() != be) {
        return Status::InvalidArgument("rebuild write: a root snapshot contribution has " +
                                       std::to_string(c.size()) + " elements, expected " +
                                       std::to_string(be));
      }
      parts.push_back(c.data());
    }
    rebuild_sum.resize(be);
    shamir::SmpCombine(parts, be, rebuild_sum.data());
    S3ORAM_RETURN_IF_ERROR(
        store->WriteRootSnapshot(rebuild_target->applied_evictions, rebuild_sum));
    return wire::Body{wire::RebuildWriteReply{rebuild_target->next_bucket}};
  }

  // REBUILD_WRITE, on the target: sum the participants' contributions and
  // write them. Ranges arrive in order; a resent range is rewritten with the
  // same values, so a retry is harmless, and a gap is refused.
  Result<wire::Body> HandleRebuildWrite(const wire::Header& h,
                                        const wire::RebuildWriteRequest& req) {
    S3ORAM_RETURN_IF_ERROR(CheckRebuildTarget(h));
    const std::uint64_t count = req.holes.size();
    if (req.first_bucket == 0) return RebuildWriteRootSnapshot(req);
    S3ORAM_RETURN_IF_ERROR(CheckRange(req.first_bucket, count, "rebuild write"));
    if (req.first_bucket > rebuild_target->next_bucket) {
      return Status::InvalidArgument("rebuild write: range starts at bucket " +
                                     std::to_string(req.first_bucket) + " but buckets from " +
                                     std::to_string(rebuild_target->next_bucket) +
                                     " on are not written yet");
    }
    if (req.contributions.size() != threshold + 1) {
      return Status::InvalidArgument("rebuild write: " +
                                     std::to_string(req.contributions.size()) +
                                     " contributions, expected t + 1 = " +
                                     std::to_string(threshold + 1));
    }
    std::uint64_t written = 0;
    for (std::uint8_t f : req.holes) written += f ? 0 : 1;
    const std::size_t be = store->bucket_elems();
    const std::size_t n = written * be;
    std::vector<const Elem*> parts;
    for (std::size_t i = 0; i < req.contributions.size(); ++i) {
      if (req.contributions[i].size() != n) {
        return Status::InvalidArgument("rebuild write: contribution " + std::to_string(i) +
                                       " has " + std::to_string(req.contributions[i].size()) +
                                       " elements, expected " + std::to_string(n));
      }
      parts.push_back(req.contributions[i].data());
    }
    // The masks cancel in this sum: it is K's share. Holes stay holes (zero).
    rebuild_sum.resize(n);
    shamir::SmpCombine(parts, n, rebuild_sum.data());
    // A bucket whose share sums to all zeros is not written either: the fresh
    // file already reads as zeros there. This keeps the file as sparse as the
    // lost one where a survivor reports a never-written bucket as data because
    // it shares a filesystem block with a written neighbour (buckets are not
    // block-aligned). A written bucket's share is uniformly random, so being
    // all zeros is a non-event; either way the bytes on disk are the same.
    std::vector<bool> skip(count, true);
    std::vector<std::size_t> offset(count, 0);  // of bucket i in rebuild_sum
    for (std::size_t i = 0, at = 0; i < count; ++i) {
      if (req.holes[i]) continue;
      offset[i] = at;
      const Elem* b = rebuild_sum.data() + at * be;
      skip[i] = std::all_of(b, b + be, [](Elem e) { return e == 0; });
      ++at;
    }
    for (std::size_t i = 0; i < count;) {
      if (skip[i]) {
        ++i;
        continue;
      }
      // Buckets i..j-1 are written and none is a hole, so they are
      // consecutive in rebuild_sum too: one pwrite.
      std::size_t j = i;
      while (j < count && !skip[j]) ++j;
      S3ORAM_RETURN_IF_ERROR(store->WriteBuckets(
          req.first_bucket + i, {rebuild_sum.data() + offset[i] * be, (j - i) * be}));
      i = j;
    }
    rebuild_target->next_bucket = std::max(rebuild_target->next_bucket, req.first_bucket + count);
    return wire::Body{wire::RebuildWriteReply{rebuild_target->next_bucket}};
  }

  // REBUILD_FINISH, on the target: every bucket written; make the store live.
  Result<wire::Body> HandleRebuildFinish(const wire::Header& h,
                                         const wire::RebuildFinishRequest& req) {
    // A resent FINISH after success: the live store already says so.
    if (store && !store->rebuilding() && store->meta().fs_id == h.fs_id &&
        store->meta().applied_seq == req.applied_seq &&
        store->meta().applied_evictions == req.applied_evictions) {
      return wire::Body{wire::RebuildFinishReply{}};
    }
    S3ORAM_RETURN_IF_ERROR(CheckRebuildTarget(h));
    const RebuildTarget& rt = *rebuild_target;
    if (rt.next_bucket != store->num_buckets() + 1) {
      return Status::FailedPrecondition("rebuild finish: only buckets 1.." +
                                        std::to_string(rt.next_bucket - 1) + " of " +
                                        std::to_string(store->num_buckets()) + " were written");
    }
    if (req.applied_seq != rt.applied_seq || req.applied_evictions != rt.applied_evictions) {
      return Status::InvalidArgument("rebuild finish: counters differ from REBUILD_BEGIN's");
    }
    ServerMeta meta = store->meta();
    meta.epoch = std::max(rt.epoch, h.epoch);
    meta.applied_seq = rt.applied_seq;
    meta.applied_evictions = rt.applied_evictions;
    S3ORAM_RETURN_IF_ERROR(store->FinishRebuild(meta));
    rebuild_target.reset();
    max_epoch = std::max(max_epoch, meta.epoch);
    spdlog::info("rebuild of filesystem {} finished: {} evictions applied, seq {}, {} allocated",
                 HexId(meta.fs_id), meta.applied_evictions, meta.applied_seq,
                 store->allocated_bytes());
    return wire::Body{wire::RebuildFinishReply{}};
  }

  // Backup reads check the filesystem id but not the epoch: they change
  // nothing, and a client restoring on a fresh machine has no epoch yet.
  Status CheckBackupRead(const wire::Header& h) const {
    if (!store || !backups) {
      return Status::FailedPrecondition("server holds no filesystem; run s3oram init");
    }
    if (h.fs_id != store->meta().fs_id) {
      return Status::FailedPrecondition("backup request for filesystem " + HexId(h.fs_id) +
                                        " but this server holds " + HexId(store->meta().fs_id));
    }
    return Status::Ok();
  }

  // A backup upload comes from the lease holder (the unmounting daemon, or
  // `backup-state` beside it with the state's epoch) or, when nobody holds
  // the lease, from the newest epoch: a client that was taken over cannot
  // replace its successor's backup.
  Status CheckBackupWrite(const wire::Header& h) {
    S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
    if (!backups) return Status::FailedPrecondition("server holds no filesystem");
    if (lease.held() && h.epoch != lease.holder_epoch) {
      return Status::LeaseHeld("fenced: epoch " + std::to_string(h.epoch) +
                               " may not replace the backup while epoch " +
                               std::to_string(lease.holder_epoch) + " holds the filesystem");
    }
    if (!lease.held() && h.epoch < store->meta().epoch) {
      return Status::LeaseHeld("stale epoch " + std::to_string(h.epoch) + ": epoch " +
                               std::to_string(store->meta().epoch) +
                               " has used the filesystem since");
    }
    return Status::Ok();
  }

  // A SCRUB or PARITY range: in the tree, and at most kMaxScrubBytes of
  // share file to read unless it is one bucket.
  Status CheckScrubRange(std::uint64_t first, std::uint32_t count, const char* what) const {
    S3ORAM_RETURN_IF_ERROR(CheckRange(first, count, what));
    const std::uint64_t bytes = std::uint64_t{count} * store->bucket_elems() * sizeof(Elem);
    if (count > 1 && bytes > wire::kMaxScrubBytes) {
      return Status::InvalidArgument(std::string(what) + ": " + std::to_string(count) +
                                     " buckets are " + std::to_string(bytes) +
                                     " bytes, more than one request may read (" +
                                     std::to_string(wire::kMaxScrubBytes) + ")");
    }
    return Status::Ok();
  }

  // SCRUB and PARITY of bucket 0: the root snapshot the pending eviction
  // reads, or an empty reply when there is none.
  Result<bool> IsRootSnapshotRequest(std::uint64_t first, std::uint32_t count) const {
    if (first != wire::kRootSnapshotBucket) return false;
    if (count != 1) return Status::InvalidArgument("the root snapshot is one bucket (count 1)");
    return true;
  }

  Result<wire::Body> HandleScrub(const wire::ScrubRequest& req) {
    S3ORAM_ASSIGN_OR_RETURN(const bool root, IsRootSnapshotRequest(req.first_bucket, req.count));
    if (root) {
      wire::ScrubReply reply;
      if (store->HoldsPendingRootSnapshot()) {
        S3ORAM_ASSIGN_OR_RETURN(reply.damaged, store->ScrubRootSnapshot(nullptr, nullptr));
        LogRootSnapshotDamage(reply.damaged);
      }
      return wire::Body{std::move(reply)};
    }
    S3ORAM_RETURN_IF_ERROR(CheckScrubRange(req.first_bucket, req.count, "scrub"));
    wire::ScrubReply reply;
    reply.first_bucket = req.first_bucket;
    S3ORAM_ASSIGN_OR_RETURN(reply.damaged, store->Scrub(req.first_bucket, req.count));
    std::size_t bad = 0;
    for (std::uint8_t f : reply.damaged) bad += f;
    if (bad > 0) {
      spdlog::error("scrub: {} damaged slots in buckets {}..{} of server {}'s share file; "
                    "repair: s3oram rebuild --server {}",
                    bad, req.first_bucket, req.first_bucket + req.count - 1, config.index,
                    config.index);
    }
    return wire::Body{std::move(reply)};
  }

  // Digests as the wire carries them: kParityElemsPerSlot elements per slot.
  static std::vector<Elem> Flatten(const std::vector<digest::SlotDigest>& d) {
    static_assert(wire::kParityElemsPerSlot == digest::kDigestElems);
    std::vector<Elem> out;
    out.reserve(d.size() * digest::kDigestElems);
    for (const auto& x : d) out.insert(out.end(), x.begin(), x.end());
    return out;
  }

  void LogRootSnapshotDamage(const std::vector<std::uint8_t>& damaged) const {
    std::size_t bad = 0;
    for (std::uint8_t f : damaged) bad += f;
    if (bad > 0) {
      spdlog::error(
          "scrub: {} damaged slots in the root snapshot (root.bin) of server {}; "
          "repair: s3oram rebuild --server {}",
          bad, config.index, config.index);
    }
  }

  Result<wire::Body> HandleParity(const wire::ParityRequest& req) {
    S3ORAM_ASSIGN_OR_RETURN(const bool root, IsRootSnapshotRequest(req.first_bucket, req.count));
    const digest::DigestKey key(req.seed, static_cast<std::size_t>(store->slot_elems()));
    if (root) {
      wire::ParityReply reply;
      if (store->HoldsPendingRootSnapshot()) {
        std::vector<digest::SlotDigest> digests;
        S3ORAM_ASSIGN_OR_RETURN(reply.damaged, store->ScrubRootSnapshot(&key, &digests));
        reply.digests = Flatten(digests);
        LogRootSnapshotDamage(reply.damaged);
      }
      return wire::Body{std::move(reply)};
    }
    S3ORAM_RETURN_IF_ERROR(CheckScrubRange(req.first_bucket, req.count, "parity"));
    std::vector<digest::SlotDigest> digests;
    wire::ParityReply reply;
    reply.first_bucket = req.first_bucket;
    S3ORAM_ASSIGN_OR_RETURN(reply.damaged,
                            store->Scrub(req.first_bucket, req.count, key, &digests));
    reply.digests = Flatten(digests);
    std::size_t bad = 0;
    for (std::uint8_t f : reply.damaged) bad += f;
    if (bad > 0) {
      spdlog::error("scrub: {} damaged slots in buckets {}..{} of server {}'s share file; "
                    "repair: s3oram rebuild --server {}",
                    bad, req.first_bucket, req.first_bucket + req.count - 1, config.index,
                    config.index);
    }
    return wire::Body{std::move(reply)};
  }

  Result<wire::Body> HandleEvictCheck(const wire::EvictCheckRequest& req) {
    const digest::DigestKey key(req.seed, static_cast<std::size_t>(store->slot_elems()));
    std::vector<Elem> combination;
    S3ORAM_ASSIGN_OR_RETURN(auto digests,
                            store->ShadowDigests(req.eviction, req.attempt, key, req.seed,
                                                 wire::kEvictCheckCombinations, &combination));
    return wire::Body{
        wire::EvictCheckReply{req.eviction, Flatten(digests), std::move(combination)}};
  }

  Result<wire::Body> HandleMacOpen(const wire::MacOpenRequest& req) {
    const ServerMeta& meta = store->meta();
    const TreeGeometry geo{meta.shape.height, meta.shape.bucket_size};
    const LeafId leaf = geo.EvictionLeaf(req.eviction);
    std::vector<BucketId> buckets;
    for (std::uint32_t k = 0; k <= geo.height; ++k) buckets.push_back(geo.BucketOnPath(leaf, k));
    buckets.push_back(TreeGeometry::Sibling(leaf));
    const std::size_t Z = geo.bucket_size, m = static_cast<std::size_t>(store->slot_elems());
    const std::size_t rows = wire::kEvictCheckCombinations;
    const std::vector<Elem> weights =
        digest::CombinationWeights(req.seed, rows, buckets.size() * Z);
    wire::MacOpenReply reply{req.eviction, std::vector<Elem>(rows * m, 0)};
    std::vector<Elem> bucket(store->bucket_elems());
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      // The eviction read the root as snapshotted at its PREPARE (the live
      // one has the next round's writes by now).
      if (buckets[i] == 1 && store->RootSnapshotEviction() == req.eviction + 1) {
        S3ORAM_RETURN_IF_ERROR(store->ReadRootSnapshot(req.eviction, bucket));
      } else {
        S3ORAM_RETURN_IF_ERROR(store->ReadBucket(buckets[i], bucket));
        S3ORAM_RETURN_IF_ERROR(store->VerifyBuckets(buckets[i], bucket));
      }
      for (std::size_t r = 0; r < rows; ++r) {
        digest::AddCombination(bucket, m,
                               std::span<const Elem>(weights).subspan(r * buckets.size() * Z + i * Z, Z),
                               std::span<Elem>(reply.combination).subspan(r * m, m));
      }
    }
    return wire::Body{std::move(reply)};
  }

  Result<wire::Body> HandleSlotShare(const wire::SlotShareRequest& req) {
    const std::uint64_t z = store->meta().shape.bucket_size;
    if (req.slot >= z) {
      return Status::InvalidArgument("slot share: slot " + std::to_string(req.slot) +
                                     " >= bucket size " + std::to_string(z));
    }
    if (req.bucket == wire::kRootSnapshotBucket) {
      S3ORAM_ASSIGN_OR_RETURN(auto share, store->RootSnapshotSlot(req.slot));
      return wire::Body{wire::SlotShareReply{req.bucket, req.slot, std::move(share)}};
    }
    S3ORAM_RETURN_IF_ERROR(CheckRange(req.bucket, 1, "slot share"));
    std::vector<Elem> bucket(store->bucket_elems());
    S3ORAM_RETURN_IF_ERROR(store->ReadBucket(req.bucket, bucket));
    S3ORAM_RETURN_IF_ERROR(store->VerifyBuckets(req.bucket, bucket));
    const std::size_t m = static_cast<std::size_t>(store->slot_elems());
    const auto first = bucket.begin() + static_cast<std::ptrdiff_t>(req.slot * m);
    return wire::Body{wire::SlotShareReply{req.bucket, req.slot,
                                           std::vector<Elem>(first, first + static_cast<std::ptrdiff_t>(m))}};
  }

  // Benchmarks only: see wire.h AGE_FILL. The store refuses a used tree.
  Result<wire::Body> HandleAgeFill(const wire::AgeFillRequest& req) {
    S3ORAM_RETURN_IF_ERROR(CheckScrubRange(req.first_bucket, req.count, "age fill"));
    S3ORAM_RETURN_IF_ERROR(store->CheckUnused());  // before expanding up to 256 MiB
    const std::size_t be = static_cast<std::size_t>(store->bucket_elems());
    std::vector<Elem> data(std::size_t{req.count} * be);
    for (std::uint32_t i = 0; i < req.count; ++i) {
      age_fill::BucketShares(req.seed, req.first_bucket + i, threshold, config.index,
                             std::span<Elem>(data).subspan(i * be, be));
    }
    S3ORAM_RETURN_IF_ERROR(store->FillUnusedBuckets(req.first_bucket, data));
    if (req.first_bucket + req.count - 1 == store->num_buckets()) {
      spdlog::info("age fill: every bucket of server {}'s tree written (benchmarks only)",
                   config.index);
    }
    return wire::Body{wire::AgeFillReply{req.first_bucket}};
  }

  Result<wire::Body> HandleBackupPut(const wire::BackupPutRequest& req) {
    S3ORAM_ASSIGN_OR_RETURN(std::uint64_t received,
                            backups->Put(req.generation, req.offset, req.total, req.last,
                                         req.shares, req.key_epoch));
    return wire::Body{wire::BackupPutReply{req.generation, received}};
  }

  Result<wire::Body> HandleBackupGet(const wire::BackupGetRequest& req) {
    wire::BackupGetReply reply;
    reply.generation = req.generation;
    S3ORAM_ASSIGN_OR_RETURN(reply.shares,
                            backups->Get(req.generation, req.offset, req.count, &reply.total));
    return wire::Body{std::move(reply)};
  }

  Result<wire::Body> Dispatch(const wire::Message& msg) {
    const wire::Header& h = msg.header;
    return std::visit(
        [&](const auto& body) -> Result<wire::Body> {
          using T = std::decay_t<decltype(body)>;
          if constexpr (std::is_same_v<T, wire::StatusRequest>) {
            // STATUS is never refused and changes nothing: a client that is
            // refused the lease must not disturb the holder.
            wire::StatusReply r = MakeStatus();
            const std::lock_guard lock(aside_mu);
            return wire::Body{WithProgress(std::move(r))};
          } else if constexpr (std::is_same_v<T, wire::StatsRequest>) {
            const std::lock_guard lock(aside_mu);
            return wire::Body{stats};  // same rule as STATUS
          } else if constexpr (std::is_same_v<T, wire::ScrubRequest>) {
            // Read-only and the same for every client: no lease needed, so a
            // scrub can run beside a mount (s3oram scrub, its timer).
            S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
            return HandleScrub(body);
          } else if constexpr (std::is_same_v<T, wire::ParityRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
            return HandleParity(body);
          } else if constexpr (std::is_same_v<T, wire::EvictCheckRequest>) {
            // Reads the holder's prepared eviction; changes nothing.
            S3ORAM_RETURN_IF_ERROR(CheckHolder(h));
            return HandleEvictCheck(body);
          } else if constexpr (std::is_same_v<T, wire::MacOpenRequest>) {
            // Reads the holder's committed tree; changes nothing.
            S3ORAM_RETURN_IF_ERROR(CheckHolder(h));
            if (!store) return Status::FailedPrecondition("server holds no filesystem");
            return HandleMacOpen(body);
          } else if constexpr (std::is_same_v<T, wire::SlotShareRequest>) {
            // Read-only, no lease: scrub runs beside a mount.
            S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
            return HandleSlotShare(body);
          } else if constexpr (std::is_same_v<T, wire::AgeFillRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckHolder(h));
            if (!store) return Status::FailedPrecondition("server holds no filesystem");
            return HandleAgeFill(body);
          } else if constexpr (std::is_same_v<T, wire::InitRequest>) {
            return HandleInit(h, body);
          } else if constexpr (std::is_same_v<T, wire::LeaseAcquireRequest>) {
            return HandleLeaseAcquire(h, body);
          } else if constexpr (std::is_same_v<T, wire::LeaseReleaseRequest>) {
            return HandleLeaseRelease(h);
          } else if constexpr (std::is_same_v<T, wire::LeaseQueryRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
            return wire::Body{LeaseState(false)};
          } else if constexpr (std::is_same_v<T, wire::RetrieveRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckHolder(h));
            return HandleRetrieve(body);
          } else if constexpr (std::is_same_v<T, wire::WriteRootRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckHolder(h));
            return HandleWriteRoot(h, body);
          } else if constexpr (std::is_same_v<T, wire::RetrieveWriteRootRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckHolder(h));
            return HandleRetrieveWriteRoot(h, body);
          } else if constexpr (std::is_same_v<T, wire::EvictPrepareRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckHolder(h));
            return HandlePrepare(h, body);
          } else if constexpr (std::is_same_v<T, wire::EvictResultRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckHolder(h));
            return HandleResult(body);
          } else if constexpr (std::is_same_v<T, wire::EvictCommitRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckHolder(h));
            return HandleCommit(h, body);
          } else if constexpr (std::is_same_v<T, wire::RebuildBeginRequest>) {
            return HandleRebuildBegin(h, body);
          } else if constexpr (std::is_same_v<T, wire::RebuildReadRequest>) {
            // A survivor: a live store of this filesystem, read for the
            // holder of its lease only (the rebuild client takes it, so no
            // mount can change the tree under the copy).
            S3ORAM_RETURN_IF_ERROR(CheckHolder(h));
            return HandleRebuildRead(body);
          } else if constexpr (std::is_same_v<T, wire::RebuildWriteRequest>) {
            return HandleRebuildWrite(h, body);
          } else if constexpr (std::is_same_v<T, wire::RebuildFinishRequest>) {
            return HandleRebuildFinish(h, body);
          } else if constexpr (std::is_same_v<T, wire::BackupPutRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckBackupWrite(h));
            return HandleBackupPut(body);
          } else if constexpr (std::is_same_v<T, wire::BackupListRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckBackupRead(h));
            auto list = backups->List();
            if (Lies("counters")) list.push_back(wire::BackupInfo{UINT64_MAX, 1});
            return wire::Body{wire::BackupListReply{std::move(list)}};
          } else if constexpr (std::is_same_v<T, wire::BackupGetRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckBackupRead(h));
            return HandleBackupGet(body);
          } else {
            return Status::Protocol(std::string("a server does not accept ") +
                                    wire::MessageTypeName(wire::TypeOf(wire::Body{body})));
          }
        },
        msg.body);
  }

  // Handles one client frame and returns the reply frame.
  std::vector<std::uint8_t> Handle(std::span<const std::uint8_t> frame) {
    const auto t0 = Clock::now();
    std::vector<std::uint8_t> reply = HandleUntimed(frame);
    ++stats.requests;
    stats.busy_us += Micros(Clock::now() - t0);
    return reply;
  }

  std::vector<std::uint8_t> HandleUntimed(std::span<const std::uint8_t> frame) {
    auto decoded = wire::Decode(frame);
    wire::Header reply_header;
    if (!decoded.ok()) {
      // Echo the seq from its fixed offset when the frame is long enough, so
      // the client sees this error instead of a timeout.
      constexpr std::size_t kSeqOffset = 4 + 2 + 2 + 16 + 8;
      if (frame.size() >= wire::kHeaderBytes) {
        for (int b = 0; b < 8; ++b) reply_header.seq |= std::uint64_t{frame[kSeqOffset + b]} << (8 * b);
      }
      spdlog::warn("rejecting malformed request: {}", decoded.status().ToString());
      return wire::Encode(reply_header, wire::ErrorFromStatus(decoded.status()));
    }
    reply_header = decoded->header;
    if (store) reply_header.fs_id = store->meta().fs_id;
    auto result = Dispatch(*decoded);
    if (!result.ok()) {
      spdlog::warn("{} (seq {}) failed: {}", wire::MessageTypeName(decoded->header.type),
                   decoded->header.seq, result.status().ToString());
      return wire::Encode(reply_header, wire::ErrorFromStatus(result.status()));
    }
    if (store) reply_header.fs_id = store->meta().fs_id;
    return wire::Encode(reply_header, result.value());
  }
};

Result<std::unique_ptr<RequestHandler>> RequestHandler::Create(const ServerConfig& config,
                                                               PeerExchange& peers) {
  random::EnsureInitialized();
  auto s = std::make_unique<Impl>();
  s->config = config;
  s->peers = &peers;
  s->parties = s->config.peers.size() + 1;
  s->threshold = (s->parties - 1) / 2;
  if (s->threshold < 1) return Status::InvalidArgument("a server needs at least two peers");
  std::vector<Elem> xs;
  for (std::size_t i = 0; i < s->parties; ++i) xs.push_back(shamir::PartyX(i));
  S3ORAM_ASSIGN_OR_RETURN(s->lambda, shamir::LagrangeAtZero(xs));
  if (s->config.index >= s->parties) {
    return Status::InvalidArgument("server index " + std::to_string(s->config.index) +
                                   " out of range for " + std::to_string(s->parties) + " parties");
  }
  for (const auto& p : s->config.peers) {
    if (p.index >= s->parties) {
      return Status::InvalidArgument("peer index " + std::to_string(p.index) + " out of range");
    }
    s->peer_indices.push_back(p.index);
  }
  // The SMP rounds address parties by index: each must be one distinct peer.
  // (ParseServerConfig guarantees this for configs read from a file.)
  std::sort(s->peer_indices.begin(), s->peer_indices.end());
  if (std::adjacent_find(s->peer_indices.begin(), s->peer_indices.end()) !=
          s->peer_indices.end() ||
      std::binary_search(s->peer_indices.begin(), s->peer_indices.end(), s->config.index)) {
    return Status::InvalidArgument("peer indices must be distinct and differ from server index " +
                                   std::to_string(s->config.index));
  }
  s->threads =
      s->config.threads ? s->config.threads : std::max(1u, std::thread::hardware_concurrency());
  s->pool = std::make_unique<boost::asio::thread_pool>(s->threads);
  s->evict_pool = std::make_unique<boost::asio::thread_pool>(s->threads);
  if (s->config.eviction_nice > 0) {
    // One task per thread: each waits for all the others, so no thread
    // takes two and every one lowers its own priority. The latch is shared:
    // a task may still be inside arrive_and_wait when the count reaches
    // zero and this function returns.
    auto all = std::make_shared<std::latch>(static_cast<std::ptrdiff_t>(s->threads));
    for (std::size_t i = 0; i < s->threads; ++i) {
      boost::asio::post(*s->evict_pool, [all, by = s->config.eviction_nice] {
        LowerThisThreadsPriority(by);
        all->arrive_and_wait();
      });
    }
    all->wait();
  }

  // tmpfs backs a read of a file hole through a mapping with a new page: the
  // server reads never-written buckets through its mapping, so on a full
  // tmpfs such a read kills it (SIGBUS), where a disk filesystem reads zeros.
  if (struct statfs fs{}; ::statfs(s->config.data_dir.c_str(), &fs) == 0 &&
                          fs.f_type == TMPFS_MAGIC) {
    spdlog::warn("data dir {} is on tmpfs: if that tmpfs fills up, reading a never-written "
                 "bucket kills this server; keep the shares on a disk filesystem",
                 s->config.data_dir);
  }
  auto opened = ShareStore::Open(s->config.data_dir, s->config.sync);
  if (opened.ok()) {
    s->store = std::move(opened).value();
    S3ORAM_ASSIGN_OR_RETURN(s->backups, BackupStore::Open(s->config.data_dir, s->config.sync));
    const ServerMeta& m = s->store->meta();
    if (m.server_index != s->config.index) {
      return Status::FailedPrecondition("data dir " + s->config.data_dir +
                                        " holds the share of server " +
                                        std::to_string(m.server_index) + ", but this is server " +
                                        std::to_string(s->config.index));
    }
    S3ORAM_ASSIGN_OR_RETURN(s->lease, LoadLease(s->config.data_dir));
    s->max_epoch = std::max({m.epoch, s->lease.holder_epoch, s->lease.highest_epoch});
    spdlog::info("opened filesystem {} (H={} Z={} m={}): {} evictions applied, seq {}, lease {}",
                 HexId(m.fs_id), m.shape.height, m.shape.bucket_size, m.shape.elems_per_slot,
                 m.applied_evictions, m.applied_seq,
                 s->lease.held() ? "held by epoch " + std::to_string(s->lease.holder_epoch)
                                 : std::string("free"));
  } else if (opened.status().code() != Status::Code::kNotFound) {
    return opened.status().WithContext("opening " + s->config.data_dir);
  } else {
    spdlog::info("no filesystem in {} yet; waiting for init", s->config.data_dir);
  }
  std::unique_ptr<RequestHandler> h(new RequestHandler());
  h->impl_ = std::move(s);
  return h;
}

RequestHandler::~RequestHandler() = default;

std::vector<std::uint8_t> RequestHandler::Handle(std::span<const std::uint8_t> frame) {
  return impl_->Handle(frame);
}

bool RequestHandler::HasPendingPrepare() const { return impl_->job.has_value(); }

void RequestHandler::RunPrepare() { impl_->RunPrepare(); }

bool RequestHandler::ServedDuringPrepare(std::span<const std::uint8_t> frame) {
  const auto type = wire::PeekType(frame);
  if (!type) return false;
  switch (*type) {
    case wire::MessageType::kStatusRequest:
    case wire::MessageType::kStatsRequest:
    case wire::MessageType::kRetrieveRequest:
    case wire::MessageType::kRetrieveWriteRootRequest:
    case wire::MessageType::kWriteRootRequest:
    case wire::MessageType::kLeaseAcquireRequest:
    case wire::MessageType::kLeaseReleaseRequest:
    case wire::MessageType::kLeaseQueryRequest:
      return true;
    default:
      return false;
  }
}

std::optional<std::pair<std::uint64_t, std::uint32_t>> RequestHandler::PrepareAttemptOf(
    std::span<const std::uint8_t> frame) {
  const auto type = wire::PeekType(frame);
  if (!type || *type != wire::MessageType::kEvictPrepareRequest) return std::nullopt;
  auto msg = wire::Decode(frame);
  if (!msg.ok()) return std::nullopt;
  const auto* req = std::get_if<wire::EvictPrepareRequest>(&msg->body);
  if (!req) return std::nullopt;
  return std::make_pair(req->eviction, req->attempt);
}

wire::StatusReply RequestHandler::Progress() const {
  const std::lock_guard lock(impl_->aside_mu);
  return impl_->WithProgress(wire::StatusReply{});
}

const ShareStore* RequestHandler::store() const { return impl_->store.get(); }

std::size_t RequestHandler::threads() const { return impl_->threads; }

}  // namespace s3oram::serverd

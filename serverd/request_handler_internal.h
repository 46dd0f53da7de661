// The state of one s3oram server's request handler (RequestHandler::Impl) and
// the methods of each operation family, for the handler's own files only:
// request_handler.cpp (decoding, dispatch, INIT, construction), handle_lease.cpp,
// handle_status.cpp, handle_access.cpp, handle_eviction.cpp, handle_rebuild.cpp,
// handle_backup.cpp, handle_scrub.cpp. Which message reaches which method, and
// what is checked before, is the table in dispatch_table.cpp.
//
// Threads: requests are handled one at a time, except that RunPrepare (an
// eviction's computation) may run on another thread while Handle serves the
// frames the table marks as served during a prepare; the two share only the
// progress and the counters, under aside_mu.
#pragma once

#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/field.h"
#include "oramcore/math/kernels.h"
#include "oramcore/math/slot_digest.h"
#include "oramcore/wire/wire.h"
#include "serverd/backup_store.h"
#include "serverd/config.h"
#include "serverd/lease_file.h"
#include "serverd/peer_exchange.h"
#include "serverd/rebuild_masks.h"
#include "serverd/request_handler.h"
#include "serverd/share_store.h"
#include "serverd/smp_frames.h"

namespace s3oram::serverd {

using field::Elem;
using Clock = std::chrono::steady_clock;

// The filesystem id in hex, for messages.
std::string HexId(const wire::FsId& id);
inline std::uint64_t Micros(Clock::duration d) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}
// Shape limits shared by INIT and REBUILD_BEGIN.
Status ValidateShape(const wire::StoreShape& s);
// Lowers the calling thread's CPU priority by `by` nice steps (0: unchanged).
void LowerThisThreadsPriority(std::uint32_t by);

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
    // The servers computing this attempt (bit p: party p; this one among
    // them) and the Lagrange weights at 0 over their points, indexed by
    // party (zero for the others): any 2t + 1 of them recover the degree-2t
    // products, so the others (excluded by the client) are not waited for.
    std::uint32_t participants = 0;
    std::vector<Elem> lambda;
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
  // Work counters since start (STATS); updated by the handlers below, always
  // under aside_mu: STATS copies the whole under it on the serving loop
  // while the worker and a PREPARE's thread update them.
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
    // A catch-up (StoreRebuild::BeginCatchUp): the writes replace some
    // buckets of the live store in place, in any order; the others stay.
    bool catch_up = false;
    // The last range summed (its nonce, first bucket and hole map): a
    // REBUILD_WRITE sent again for it is answered again, not waited for
    // (its terms were used up).
    std::optional<std::tuple<wire::RebuildNonce, std::uint64_t, std::vector<std::uint8_t>>>
        last_written = std::nullopt;
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

  // ---- Dispatch: which request types a server accepts, from whom, and
  // which method runs each (the table is in dispatch_table.cpp).
  enum class Sender {
    kAnyone,          // no check: STATUS, STATS
    kSelfChecked,     // the handler checks: INIT, REBUILD_BEGIN/WRITE/FINISH
    kSameFilesystem,  // CheckRequest: a live store of the header's filesystem
    kLeaseHolder,     // CheckHolder: that, and the header's epoch holds the lease
    kBackupReader,    // CheckBackupRead
    kBackupWriter,    // CheckBackupWrite
  };
  struct Route {
    wire::MessageType type;
    Sender sender;
    // Refused with "server holds no filesystem" before any other check.
    bool needs_store;
    // Served while an EVICT_PREPARE computes on another thread: reads and
    // writes nothing RunPrepare touches (request_handler.h).
    bool during_prepare;
    Result<wire::Body> (*run)(Impl& impl, const wire::Message& msg);
  };
  // The row of `type`, or null: the server accepts no such request.
  static const Route* FindRoute(wire::MessageType type);
  static std::span<const Route> Routes();

  // request_handler.cpp
  // Runs fn over [0, m) split in column ranges across `on` (pool or evict_pool).
  void ParallelColumns(boost::asio::thread_pool& on, std::size_t m,
                       const std::function<void(kernels::ColumnRange)>& fn);
  Result<wire::Body> HandleInit(const wire::Header& h, const wire::InitRequest& req);
  Result<wire::Body> Dispatch(const wire::Message& msg);
  // Handles one client frame and returns the reply frame.
  std::vector<std::uint8_t> Handle(std::span<const std::uint8_t> frame);
  std::vector<std::uint8_t> HandleUntimed(std::span<const std::uint8_t> frame);

  // handle_lease.cpp
  Result<wire::Body> HandleLeaseQuery();
  // Every request that reads or changes the tree must come from the lease
  // holder: a client whose lease was taken over (--force) is fenced off even
  // if its epoch is newer than anything else this server saw.
  Status CheckHolder(const wire::Header& h);
  wire::LeaseReply LeaseState(bool granted) const;
  // The reply LeaseState gives for that lease, epoch and last contact.
  static wire::LeaseReply LeaseReplyOf(const LeaseRecord& lease, std::uint64_t max_epoch,
                                       Clock::time_point last_seen, bool granted);
  // ACQUIRE with the header's epoch: granted when the lease is free, already
  // this epoch's (a resend, or the holder renewing it), or `force` is set.
  // Otherwise a LeaseReply with granted = false names the holder: refusing is
  // an answer, not an error, so the client can say who holds it.
  Result<wire::Body> HandleLeaseAcquire(const wire::Header& h,
                                        const wire::LeaseAcquireRequest& req);
  Result<wire::Body> HandleLeaseRelease(const wire::Header& h);
  Status CheckRequest(const wire::Header& h, bool needs_store);

  // handle_status.cpp
  // STATUS is never refused and changes nothing: a client that is refused
  // the lease must not disturb the holder. STATS: the same rule.
  Result<wire::Body> HandleStatus();
  Result<wire::Body> HandleStats();
  // `preparing`, if given: whether a PREPARE computed (its shadow was not
  // read then).
  wire::StatusReply MakeStatus(bool* preparing = nullptr) const;
  void SetProgress(std::uint32_t round, wire::EvictPhase phase);
  // `r` with the progress of the PREPARE under way (caller holds aside_mu).
  // The share done is estimated from the round and its phase, each round
  // weighted alike: reading 5 %, kernels 55 %, SMP 20 %, peer wait 10 %,
  // combining and shadow writes 10 % (roughly their times at the defaults).
  wire::StatusReply WithProgress(wire::StatusReply r) const;

  // The quick reads (RequestHandler::AnswerQuickRead) answer from this: the
  // state the last request left, published by the thread that handled it
  // (PublishQuickState) and read by another while the next request runs;
  // always under aside_mu.
  struct QuickState {
    bool has_store = false;
    bool live_store = false;  // a store, not being rebuilt
    bool has_backups = false;
    wire::FsId fs_id{};
    wire::StatusReply status;  // MakeStatus(): the PREPARE's progress is added when asked
    bool status_while_preparing = false;  // published while a PREPARE computed
    LeaseRecord lease;
    std::uint64_t max_epoch = 0;
    Clock::time_point lease_last_seen;
    std::vector<wire::BackupInfo> backups;  // BackupListToSay()
  };
  QuickState quick;
  void PublishQuickState();
  std::optional<std::vector<std::uint8_t>> AnswerQuickRead(std::span<const std::uint8_t> frame);

  // handle_access.cpp
  Status CheckRetrieve(std::uint64_t leaf, const std::vector<Elem>& select) const;
  Status CheckWriteRoot(std::uint32_t slot, const std::vector<Elem>& share) const;
  Result<wire::Body> HandleRetrieve(const wire::RetrieveRequest& req);
  // The path inner product for a checked (leaf, select).
  Result<wire::Body> Retrieve(std::uint64_t leaf, const std::vector<Elem>& select);
  // The answer is sum_q sel[q] * slot_q over the path, so by linearity its
  // digest must be the same combination of the slots' stored digests: one
  // pass over m elements checks every slot the answer used (a damaged slot
  // with a non-zero select share shows; one with a zero share did not change
  // the answer). On a mismatch the buckets are checked slot by slot to name the
  // damaged one.
  Status CheckAnswer(const std::vector<std::uint64_t>& path_buckets,
                     const std::vector<const Elem*>& views, std::span<const Elem> sel,
                     std::span<const Elem> answer) const;
  // Root write, then the retrieval over the tree that holds it; the retrieval
  // runs while the root write's fdatasync is in flight, and the reply waits
  // for both. Everything is checked before anything is written.
  Result<wire::Body> HandleRetrieveWriteRoot(const wire::Header& h,
                                             const wire::RetrieveWriteRootRequest& req);
  Result<wire::Body> HandleWriteRoot(const wire::Header& h, const wire::WriteRootRequest& req);

  // handle_eviction.cpp
  // EVICT_PREPARE (background eviction): checks the request, copies the root
  // it evicts aside (SnapshotRoot, durable), opens the shadow and leaves the
  // computation to RunPrepare; the reply (EVICT_STARTED) goes out at once, so
  // the client's next root writes may overwrite the live root. A duplicate
  // of the attempt under way or finished is answered the same way.
  Result<wire::Body> HandlePrepare(const wire::Header& h, const wire::EvictPrepareRequest& req);
  // Every party's bit.
  std::uint32_t AllParties() const;
  // The PREPARE's participants as a mask (0 in the request: every party),
  // or InvalidArgument: a party beyond the filesystem's, this server not
  // among them, or fewer than 2t + 1.
  Result<std::uint32_t> ParticipantsOf(const wire::EvictPrepareRequest& req) const;
  // The PREPARE left by HandlePrepare: the SMP rounds into the shadow, then
  // its seal. Runs on a thread of the caller's (Server's) while the thread
  // that handles requests serves only those ServedDuringPrepare admits, so it
  // reads and writes nothing they touch: not the live root (the snapshot),
  // not meta() (the job holds the shape), stats under aside_mu.
  void RunPrepare();
  // EVICT_RESULT: the outcome of the PREPARE attempt asked for. In process
  // (no thread runs PREPAREs, e.g. the fuzz harness) a pending one runs here.
  Result<wire::Body> HandleResult(const wire::EvictResultRequest& req);
  Status ComputePrepare(PrepareJob& j);
  // The PREPARE's phase times (ms), for STATS and the debug log.
  struct PrepareTimes {
    double kernel = 0, smp = 0, wait = 0, shadow = 0;
  };
  Status ReshareRound(const PrepareJob& j, std::uint32_t k, std::vector<Elem>& product,
                      SmpFrames& smp, std::vector<Elem>& combined, PrepareTimes& times);
  Result<wire::Body> HandleCommit(const wire::Header& h, const wire::EvictCommitRequest& req);
  Result<wire::Body> HandleEvictCheck(const wire::EvictCheckRequest& req);
  Result<wire::Body> HandleMacOpen(const wire::MacOpenRequest& req);

  // handle_rebuild.cpp
  // REBUILD_BEGIN, on the target K: replace whatever is here by an empty,
  // not-yet-live store of the header's filesystem.
  Result<wire::Body> HandleRebuildBegin(const wire::Header& h,
                                        const wire::RebuildBeginRequest& req);
  // The rebuild target's checks for REBUILD_WRITE / REBUILD_FINISH.
  Status CheckRebuildTarget(const wire::Header& h) const;
  // Checks a bucket range [first, first + count) against the store; `elems`
  // is the number of elements one message would carry for it.
  Status CheckRange(std::uint64_t first, std::uint64_t count, const char* what) const;
  // Derives (or reuses) the masks of a REBUILD_READ session. The CURVE secret
  // key is read from its file for this and zeroed on return; only the pair
  // seeds (Secrets) are kept, for the session's later ranges.
  Status PrepareMasks(const wire::RebuildReadRequest& req);
  // REBUILD_READ, on a survivor: masked Lagrange terms for a bucket range,
  // sent to the target (SendTerms); the reply is the hole map.
  Result<wire::Body> HandleRebuildRead(const wire::Header& h, const wire::RebuildReadRequest& req);
  // REBUILD_READ of "bucket 0": this server's share of the root snapshot of
  // the eviction under way (root.bin), masked as a bucket is. Without one,
  // FailedPrecondition (the rebuild then has none to carry over).
  Result<wire::Body> RebuildReadRootSnapshot(const wire::Header& h,
                                             const wire::RebuildReadRequest& req);
  // Sends a survivor's terms of a range to the target and answers the
  // client with the hole map.
  Result<wire::Body> SendTermsToTarget(const wire::Header& h, const wire::RebuildReadRequest& req,
                                       std::vector<std::uint8_t> holes, std::vector<Elem> terms);
  // The participants' terms of a REBUILD_WRITE's range, summed into
  // rebuild_sum (`written` buckets of the store's bucket size).
  Status SumTerms(const wire::RebuildWriteRequest& req, std::uint64_t written);
  // REBUILD_WRITE of "bucket 0": the target's root snapshot for the eviction
  // under way (the survivors' applied_evictions), from the masked shares.
  Result<wire::Body> RebuildWriteRootSnapshot(const wire::RebuildWriteRequest& req);
  // REBUILD_BEGIN with catch_up: this server's live store becomes the target.
  Result<wire::Body> BeginCatchUp(const wire::Header& h, const wire::RebuildBeginRequest& req);
  // REBUILD_WRITE, on the target: wait for the participants' terms of the
  // range (PeerExchange::AwaitTerms), sum them and write them. Ranges of a
  // full rebuild arrive in order and a gap is refused; a range written
  // again (read again by the client) gets the same values.
  Result<wire::Body> HandleRebuildWrite(const wire::Header& h,
                                        const wire::RebuildWriteRequest& req);
  // REBUILD_FINISH, on the target: every bucket written; make the store live.
  Result<wire::Body> HandleRebuildFinish(const wire::Header& h,
                                         const wire::RebuildFinishRequest& req);

  // handle_backup.cpp
  Result<wire::Body> HandleBackupList();
  // The generations BACKUP_LIST names.
  std::vector<wire::BackupInfo> BackupListToSay() const;
  // Backup reads check the filesystem id but not the epoch: they change
  // nothing, and a client restoring on a fresh machine has no epoch yet.
  Status CheckBackupRead(const wire::Header& h) const;
  // A backup upload comes from the lease holder (the unmounting daemon, or
  // `backup-state` beside it with the state's epoch) or, when nobody holds
  // the lease, from the newest epoch: a client that was taken over cannot
  // replace its successor's backup.
  Status CheckBackupWrite(const wire::Header& h);
  Result<wire::Body> HandleBackupPut(const wire::BackupPutRequest& req);
  Result<wire::Body> HandleBackupGet(const wire::BackupGetRequest& req);

  // handle_scrub.cpp
  // A SCRUB or PARITY range: in the tree, and at most kMaxScrubBytes of
  // share file to read unless it is one bucket.
  Status CheckScrubRange(std::uint64_t first, std::uint32_t count, const char* what) const;
  // SCRUB and PARITY of bucket 0: the root snapshot the pending eviction
  // reads, or an empty reply when there is none.
  Result<bool> IsRootSnapshotRequest(std::uint64_t first, std::uint32_t count) const;
  Result<wire::Body> HandleScrub(const wire::ScrubRequest& req);
  // Digests as the wire carries them: kParityElemsPerSlot elements per slot.
  static std::vector<Elem> Flatten(const std::vector<digest::SlotDigest>& d);
  void LogRootSnapshotDamage(const std::vector<std::uint8_t>& damaged) const;
  Result<wire::Body> HandleParity(const wire::ParityRequest& req);
  Result<wire::Body> HandleSlotShare(const wire::SlotShareRequest& req);
  // Benchmarks only: see wire.h AGE_FILL. The store refuses a used tree.
  Result<wire::Body> HandleAgeFill(const wire::AgeFillRequest& req);
};

}  // namespace s3oram::serverd

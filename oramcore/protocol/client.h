// The S3ORAM client (Protocol 2 of the paper): Access(op, id, data) =
//   retrieve the block with a PIR select over its path (Subroutine 1),
//   write it, fresh-shared, to root slot nr under a new random leaf,
//   and after every A accesses run the triplet eviction (Subroutine 3) as
//   EVICT_PREPARE on all servers (they reduce degrees with SMP among
//   themselves) followed by EVICT_COMMIT.
//
// Background eviction: the eviction of round r (the A accesses that filled
// the root) starts at the end of the round and commits at the end of round
// r + 1, so its minutes of server work overlap the next round's accesses
// instead of stopping them. At the start the servers copy the root aside
// (EVICT_STARTED); round r + 1 then overwrites the live root slot by slot;
// the client moves every block of the plan to its new position in its map at
// once (logged with the plan), and until the commit retrieves such a block
// where the servers' committed tree still holds it, or, for a root slot
// round r + 1 overwrote, from its own copy (RootCopies) behind a retrieval
// that selects nothing. An access that gets to the end of round r + 1 first
// waits for the servers (EVICT_RESULT), then EVICT_CHECK and EVICT_COMMIT,
// then starts the next. The servers see PREPARE and COMMIT at fixed access
// counts, as before; a block taken out by an access during the overlap
// leaves a stale copy where the eviction puts it, whose slot is free.
//
// Guarantees:
//  * Reads return exactly the bytes last written (zeros for a block never
//    written), or an error. Every block is sealed (block_seal.h) before it is
//    shared, bound to its id and version; a reconstruction that is not a
//    valid packing or does not authenticate (a server flipped bits, answered
//    for another block, or replayed an older version) is an Integrity error
//    naming the server set, never returned as data, and changes nothing.
//  * Every access looks the same to each server: one retrieval with fresh
//    random select shares for a uniformly random-looking path, one root write
//    to the next root slot, and an eviction on a fixed schedule.
//  * One round trip per access: an access's root write is deferred and sent
//    with the next access's retrieval (RETRIEVE_WRITE_ROOT; the server writes,
//    then retrieves over the tree that includes it). It is logged in the state
//    (pending kind "root") in the same transaction that records the access
//    before, so an access that returned survives a crash of this process: the
//    next Open sends it. Sync, Close and an eviction (which reads the whole
//    root) send a deferred write on its own (WRITE_ROOT), and a retrieval of
//    the block it holds reads it from that root slot.
//  * Crash consistency: an access is recorded by one SQLite transaction that
//    logs its root write as pending and records the access before it (whose
//    root write every server acknowledged); a crash loses at most the access
//    in flight, and Open finishes a logged root write. An eviction is logged as pending
//    before PREPARE; Open finishes a pending eviction (COMMIT where some server
//    already committed, else PREPARE again with a new attempt number).
//  * Every slot on a path must hold a consistent sharing, free ones included:
//    the PIR select multiplies each slot by a share of 0 or 1, and a slot whose
//    servers disagree (a root write that reached only some of them) turns every
//    retrieval through it into garbage. So each Open starts a new epoch (the
//    servers then refuse whatever a previous, dead client left queued), and the
//    root slot an interrupted write may have touched — slot nr — is rewritten
//    with a fresh sharing before the first retrieval after an Open or after any
//    failed root write.
//  * One writer: Open acquires the filesystem's lease on every server with a
//    new epoch (above every epoch the servers have seen) and the servers
//    serve RETRIEVE, WRITE_ROOT, RETRIEVE_WRITE_ROOT and EVICT_* only to the holder. A second Open
//    is refused with kLeaseHeld naming the holder, unless it is certainly a
//    crashed earlier client of the same state file on this machine, or
//    `force_lease` is set; a client whose lease was taken over is fenced
//    (every later access fails with kLeaseHeld) and changes nothing. The
//    lease is released by Close() and by the destructor.
// Structure: what the operations share (the state, the servers and request
// headers, the keys, the lease) is a ClientSession (client_session.h); a
// block becomes a slot and back through its BlockCodec (block_codec.h); the
// evictions are an Evictor (evictor.h); the deferred root writes are a
// RootWriteQueue (root_write_queue.h); the accesses are an AccessPath
// (access_path.h), whose chunk of pipelined accesses runs in steps. This
// class opens and closes them and forwards to them.
// Not thread-safe: one access at a time (callers serialise).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"
#include "oramcore/crypto/block_seal.h"
#include "oramcore/math/robust_decode.h"
#include "oramcore/protocol/access_path.h"
#include "oramcore/protocol/catch_up.h"
#include "oramcore/protocol/client_session.h"
#include "oramcore/protocol/client_stats.h"
#include "oramcore/protocol/eviction_record.h"
#include "oramcore/protocol/evictor.h"
#include "oramcore/protocol/freshness.h"
#include "oramcore/protocol/rebuild_report.h"
#include "oramcore/protocol/root_copies.h"
#include "oramcore/protocol/root_write_queue.h"
#include "oramcore/state/client_state.h"
#include "oramcore/tree/planner.h"
#include "oramcore/wire/server_set.h"
#include "oramcore/wire/wire.h"

namespace s3oram {

struct AdoptedCounter;  // oramcore/protocol/counter_agreement.h

struct ServerStats {
  std::string endpoint;
  Status status;           // reachability
  wire::StatsReply reply;  // valid if status.ok()
};

class OramClient {
 public:
  // Creates the client state file with a new random master key wrapped under
  // `passphrase` (Argon2id cost `kdf`) and initialises every server's share
  // store (sparse, no data written). Fails if the state file exists.
  static Status Initialize(const std::string& state_path, const FsConfig& config,
                           const Secret& passphrase, const KdfParams& kdf,
                           bool overwrite_servers = false, const ServerConnector& connect = {});
  // Unwraps the master key (PermissionDenied for a wrong passphrase), opens
  // the state, connects, checks every server serves this filesystem with the
  // expected shape, starts a new epoch and finishes a pending eviction.
  static Result<std::unique_ptr<OramClient>> Open(const std::string& state_path,
                                                  const Secret& passphrase,
                                                  ClientOptions options = {});
  // Inspection only (s3oram status, backup-state): the passphrase opens the
  // sealed state, but no new epoch, no recovery and no accesses follow, so a
  // running client is not fenced off.
  static Result<std::unique_ptr<OramClient>> OpenReadOnly(const std::string& state_path,
                                                          const Secret& passphrase,
                                                          ClientOptions options = {});
  ~OramClient();

  const FsConfig& config() const { return session_->config(); }
  const OramParams& params() const { return config().params; }
  std::uint64_t block_bytes() const { return params().block_bytes; }
  const Counters& counters() const { return session_->counters(); }
  const PositionMap& position_map() const { return *pm_; }
  // Whether block `id` has a copy in the tree: a position, or the last
  // access's root write (deferred) that gives it one.
  bool Holds(BlockId id) const {
    return pm_->Find(id) != nullptr || roots_->NewestOf(id).has_value();
  }

  // One ORAM access. For kWrite, data.size() must equal block_bytes(); for kRead
  // data is ignored. Returns the block's content before the access (zeros for
  // a kWrite whose old copy did not authenticate: a whole-block write needs
  // nothing of it, so it replaces a destroyed block instead of failing; a
  // read or an update fails with kIntegrity).
  Result<std::vector<std::uint8_t>> Access(AccessOp op, BlockId id,
                                           std::span<const std::uint8_t> data);
  Result<std::vector<std::uint8_t>> Read(BlockId id) { return Access(AccessOp::kRead, id, {}); }
  Status Write(BlockId id, std::span<const std::uint8_t> data) {
    return Access(AccessOp::kWrite, id, data).status();
  }
  // A read-modify-write in one access: `modify` gets the block's content
  // (zeros if it was never written) and changes it in place; the result is
  // what the access writes back to the root. It costs what a read costs,
  // because every access rewrites its block anyway, and it looks the same to
  // the servers. Returns the stored content. `modify` must not call back into
  // this client. If the access fails, nothing of `modify`'s result was stored.
  using BlockModifier = AccessPath::BlockModifier;
  Result<std::vector<std::uint8_t>> Update(BlockId id, const BlockModifier& modify);

  // Several accesses at once, pipelined: up to kMaxPipelined retrievals go to
  // the servers back to back without waiting for each other's answers (on a
  // slow link the uplink then stays busy while servers compute and answers
  // come back). Each item is an access as Access (or Update, with `modify`)
  // performs it, in order: an item that repeats an earlier one's block sees
  // that item's result (its retrieval selects nothing: the block is served
  // from the client's copy). Each retrieval carries one of the earlier
  // accesses' deferred root writes, oldest first, so the root slots fill in
  // order and every server sees one retrieval and one root write per access,
  // as for single accesses. results[i] is item i's; an item that fails does
  // not stop the others unless the servers could not be reached, which fails
  // the rest too. Returns when every item's access is recorded (a crash
  // then loses none of them).
  using BatchItem = AccessPath::BatchItem;
  static constexpr std::size_t kMaxPipelined = AccessPath::kMaxPipelined;
  // Called before each chunk of pipelined accesses with the number of items
  // not yet done; returns the most the chunk may hold (1..kMaxPipelined).
  // Every access before the chunk is recorded when it is called, so it may
  // let other calls of this client run in between (a caller that serialises
  // calls with a lock may release it for a while): AccessMany keeps nothing
  // across chunks but its place in `items` and whether the last chunk
  // finished all it was given.
  using ChunkGate = AccessPath::ChunkGate;
  std::vector<Result<std::vector<std::uint8_t>>> AccessMany(std::span<const BatchItem> items,
                                                            const ChunkGate& gate = nullptr) {
    return access_->AccessMany(items, gate);
  }

  // Makes every committed access durable against power loss, not only against
  // a crash of this process (accesses commit with synchronous=NORMAL; this
  // writes the counters with synchronous=FULL, which syncs the whole WAL).
  // It first sends the latest access's deferred root write (see below), so
  // afterwards the servers hold every access. What fsync(2) in the filesystem
  // calls.
  Status Sync();
  // The same without sending the latest access's deferred root write: it
  // stays recorded in the state, durable with it, and goes out with the next
  // access (after a crash, recovery sends it). A constant-rate mount uses
  // this right after an access that carried every earlier root write, so an
  // fsync adds no message outside its schedule.
  Status SyncKeepingLatestRootWrite();

  // STATUS of every server (unreachable ones carry an error status).
  std::vector<ServerReport> QueryServers(std::chrono::milliseconds timeout) {
    return session_->QueryServers(timeout);
  }

  // STATS of every server: its work counters (changes nothing).
  std::vector<ServerStats> QueryServerStats(std::chrono::milliseconds timeout);

  // Server i checks buckets [first, first + count) of its share file against
  // their slot digests (SCRUB; no lease needed, changes nothing). The reply
  // is as the server sent it (ScrubWholeStore, protocol/scrub.h, checks it).
  Result<wire::ScrubReply> ScrubServer(std::size_t server, std::uint64_t first,
                                       std::uint32_t count, std::chrono::milliseconds timeout);

  // PARITY on every participant, the same request to each (s3oram scrub;
  // no lease needed, changes nothing): the replies in the order of
  // participants().
  Result<std::vector<wire::ParityReply>> ParityAll(std::uint64_t first, std::uint32_t count,
                                                   const wire::ParitySeed& seed,
                                                   std::chrono::milliseconds timeout);
  // Benchmarks only (wire.h AGE_FILL, `s3oram age-fill`): every server
  // writes every bucket of its tree with its share of empty slots, so that
  // this new filesystem costs what one in use for months costs (no bucket a
  // sparse hole). FailedPrecondition, before anything is sent, once this
  // state has made an access; each server also refuses a tree that has been
  // used. progress(done, total) counts buckets.
  Status AgeFill(const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});
  // The parity checks of the parties' sharings (shamir::ParityChecks).
  // The parity checks of the participants' points (shamir::ParityChecks),
  // for ScrubAndCompare over participants().
  std::vector<std::vector<field::Elem>> parity_rows() const;
  // The servers that take part (every one but the excluded, ascending).
  const std::vector<std::size_t>& participants() const { return session_->participants(); }
  // Which server holds the odd share of committed slot (bucket, slot), read
  // with SLOT_SHARE from every participant and judged by OddShareOut
  // (protocol/consistency.h); nullopt if not attributable, or on a
  // filesystem without share MACs.
  Result<std::optional<std::size_t>> OddServerOf(std::uint64_t bucket, std::uint32_t slot,
                                                 std::chrono::milliseconds timeout);

  // What `s3oram status` shows of this client's own state, copied so that it
  // can be shown while the client is busy: a mount daemon keeps the one
  // taken after its latest call (fused/block_engine.h) and answers status
  // from it without waiting for the access or eviction under way.
  struct Snapshot {
    std::string state_path;
    OramParams params;
    Counters counters;  // as this process moved them (counters())
    std::uint64_t live_blocks = 0;
    BlockCodec::CombinationCheck eviction_mac_check = BlockCodec::CombinationCheck::kNone;
    FreshnessVerdict freshness;
    std::optional<ProblemNote> problem_note;
    std::optional<RekeyProgress> rekey;
    std::optional<BackupMark> backup_mark;
    std::optional<Status> writes_stopped;
    bool fenced = false;
    // Per server: whether this client counts it down (ServersDown()).
    std::vector<std::optional<ServerDown>> down;
    // Per server: its retrieval answers this process outvoted (ClientStats).
    std::vector<std::uint64_t> wrong_answers;
    // The servers the state excludes (client_state.h, Exclusion).
    std::vector<Exclusion> exclusions;
    // Per server: its retrieval answers this process did not wait for
    // (they came after the first 2t + 1: ClientStats::lagged_answers).
    std::vector<std::uint64_t> lagged_answers;
    // A catch-up of an excluded server under way in this process (a mount's
    // keep-alive beat; filled in by its caller, not by TakeSnapshot).
    struct CatchUp {
      std::size_t server = 0;
      std::uint64_t done_bytes = 0;   // of the missed buckets sent so far
      std::uint64_t total_bytes = 0;  // of the missed buckets
      std::chrono::milliseconds elapsed{0};
    };
    std::optional<CatchUp> catching_up;
  };
  Snapshot TakeSnapshot() const;
  // Per server, whether this client's transport counts it down, and why
  // (wire/liveness_monitor.h). Thread-safe: it reads only the transport's
  // verdicts, so it may be called beside a call under way.
  std::vector<std::optional<ServerDown>> ServersDown() const;

  // Freshness as judged at Open (oramcore/protocol/freshness.h); a client
  // opened without allow_stale is never stale.
  const FreshnessVerdict& freshness() const { return freshness_; }

  // What every server said at open (ClientSession::AskViews: one round; a
  // writable open takes its new epoch from the leases).
  using OpeningViews = ServerViews;
  const OpeningViews& opened_with() const { return opened_with_; }
  // The state's backup mark (client_state.h BackupMark), if it has one.
  const std::optional<BackupMark>& backup_mark() const { return session_->store().backup_mark(); }
  // Records that this client's state, as of `snapshot_epoch`, was uploaded
  // as backup generation `generation` (after the upload succeeded). Refused
  // unless snapshot_epoch is this client's epoch: the caller must hold the
  // state so that nothing changed it since the snapshot (a writable client,
  // or a read-only one whose caller holds the state's lock).
  Status RecordBackup(std::uint64_t generation, std::uint64_t snapshot_epoch);
  // Declares that this writable session changed nothing a backup holds (a
  // rebuild): a state that equalled its last backup when opened still does.
  Status KeepBackupMark();
  // The last problem only a server's repair ends (client_state.h
  // ProblemNote), as recorded by the client that met it; ClearProblemNote
  // forgets it (a clean scrub with no eviction pending, a rebuild). A note
  // of a refused eviction ("eviction N was refused ...") is also forgotten
  // by the commit of eviction N, in the same transaction: what it recorded
  // now succeeds.
  const std::optional<ProblemNote>& problem_note() const {
    return session_->store().problem_note();
  }
  Status ClearProblemNote() { return session_->ClearProblemNote(); }
  // The eviction the state records as pending (logged before its PREPARE,
  // not committed yet), if any.
  Result<std::optional<std::uint64_t>> PendingEviction() const { return evictor_->Pending(); }
  // Records a problem found outside an access (s3oram scrub), so that
  // s3oram status names it as it names one a mount met (`damaged`: a
  // server's storage, which stops writes as below). Fails while another
  // process holds the state (a mount), which records it when it meets it.
  Status RecordProblemNote(const std::string& text, bool damaged) {
    return session_->RecordProblemNote(text, damaged);
  }
  // Fail-stop: set once a server has reported damaged storage to this client
  // (any request), or when it opened a state whose problem note records
  // such damage. From then on this client starts no eviction and performs
  // no write or update (each is refused with this status, code kDamaged);
  // reads go on while the root has room (at most evict_rate accesses, since
  // no eviction empties it). A repair (s3oram rebuild, or a clean scrub)
  // clears the note; the next client opened is not stopped. Stopping keeps
  // the damage where the repair finds it: an eviction that refilled a
  // damaged empty slot would hide it, and writes would put new data onto a
  // failing disk. An eviction logged as pending before is still finished.
  const std::optional<Status>& writes_stopped() const { return session_->writes_stopped(); }

  // --- A master-key rotation (oramcore/protocol/rekey.h). -----------------------------
  // The rotation the state records as under way, if any. While one is, this
  // client opens blocks and share MACs under the previous keys as well as
  // the current ones (it seals and tags under the current ones only). A
  // combination of slots tagged under two share MAC keys verifies under
  // neither, so its eviction check verifies the half of the tags both keys
  // share (crypto/share_mac_secrets.h); a rotation begun by a build before
  // halves shares none, and then only consistency is checked.
  const std::optional<RekeyProgress>& rekey() const { return session_->store().rekey(); }
  // What Evictor::CheckMac verifies now, for `s3oram status`.
  using EvictionMacCheck = BlockCodec::CombinationCheck;
  EvictionMacCheck eviction_mac_check() const { return session_->codec().combination_check(); }
  // The round whose root the accesses fill now (the eviction of that number
  // moves it out).
  std::uint64_t round() const { return evictor_->current_round(); }

  // Commits the eviction the servers compute in the background now, waiting
  // for them if they are not done: afterwards the state records no eviction
  // under way. Before a state backup and at Close (a server sees this
  // eviction commit before the end of the round: at an unmount, which it sees
  // anyway). OK if none is in flight.
  Status SettleEviction() { return evictor_->Settle(); }

  // Brings the excluded server `server` up to date and takes it back, in
  // steps (CatchUpRun in catch_up.h), so that a mount's accesses go on
  // between them: StartCatchUp checks it and starts it; each CatchUpStep
  // sends it one range of the buckets it misses, as the participants hold
  // them then (true once little is left); FinishCatchUp settles the
  // eviction under way and the root writes, sends what changed meanwhile
  // and the root, then readmits it (durably) and gives it the lease. The
  // caller holds the client for each call. Errors as CatchUpRun's; the
  // server stays excluded then (a run dropped after StartCatchUp leaves it
  // marked as being caught up: only a full rebuild takes it back).
  // `progress`: the bytes of buckets sent so far and in all.
  Result<std::unique_ptr<CatchUpRun>> StartCatchUp(
      std::size_t server, CatchUpRun::Progress progress = {},
      std::size_t range_bytes = CatchUpRun::kRangeBytes);
  Result<bool> CatchUpStep(CatchUpRun& run);
  Result<RebuildReport> FinishCatchUp(CatchUpRun& run);
  // All three at once (the accesses wait throughout).
  Result<RebuildReport> CatchUpExcluded(std::size_t server, CatchUpRun::Progress progress = {});

  // Tells the servers this client is alive (refreshes the lease's "last
  // active" time); kLeaseHeld if another client took the lease over, after
  // which this client is fenced. Cheap; call it when idle (every few seconds).
  Status RenewLease() { return session_->RenewLease(); }
  // Releases the lease (a clean unmount). Further accesses fail. Idempotent.
  Status Close();
  bool fenced() const { return session_->fenced(); }

  const ClientStats& stats() const { return stats_; }
  const TransportStats& transport_stats() const { return session_->servers().stats(); }

  // The state file this client opened, and its unlocked form (its VFS
  // opens further connections to it: the filesystem's metadata).
  const std::string& state_path() const { return session_->state_path(); }
  const std::shared_ptr<UnlockedState>& unlocked_state() const {
    return session_->unlocked_state();
  }
  // What the client's operations share (the state, the servers and request
  // headers, the keys, the lease), for the state backup, restore and rekey
  // (state_backup.h, rekey.h), which send requests of their own.
  ClientSession& session() { return *session_; }

 private:
  OramClient() = default;
  // When the catch-up under way started (for its log line).
  std::chrono::steady_clock::time_point catch_up_started_{};
  static Result<std::unique_ptr<OramClient>> OpenImpl(const std::string& state_path,
                                                      const Secret& passphrase, bool read_only,
                                                      ClientOptions options);
  // OpenImpl's steps, in order: the state, its keys and the connections;
  // every server serves it with its shape and is not behind it; it was not
  // rolled back; it is not stale (FreshnessVerdict); a writer then takes a
  // new epoch (durable), the lease, sends the root writes the state logged
  // and finishes a pending eviction.
  Status LoadState();
  void AskServersAtOpen();
  // A writable open with more than 2t + 1 participants: the one server
  // that did not answer the open's questions (silent or found down) is
  // excluded (ClientSession::Exclude) and the open goes on without it.
  Status ExcludeSilentAtOpen();
  // allow_unreachable: a server that did not answer is passed over.
  Status CheckServersHoldThisState(const std::vector<ServerReport>& reports,
                                   bool allow_unreachable);
  Status RefuseIfRolledBack(const std::vector<ServerReport>& reports, const std::string& state_path,
                            bool allow_stale) const;
  Status JudgeStateFreshness(const OpeningViews& views, const std::string& state_path,
                             bool allow_stale);
  Status StartEpoch(const std::vector<ServerReport>& reports, const AdoptedCounter& seq,
                    const std::vector<std::uint64_t>& applied_seqs);
  std::unique_ptr<ClientSession> session_;
  OpeningViews opened_with_;
  std::unique_ptr<PositionMap> pm_;
  std::vector<field::Elem> lambda_;  // Lagrange weights at 0 over all parties (degree-2t recovery)
  // A retrieval's degree-2t answer from the servers', a wrong one outvoted.
  std::optional<shamir::RobustDecoder> decoder_;
  ClientStats stats_;
  std::unique_ptr<RootCopies> root_copies_;  // null when read-only
  FreshnessVerdict freshness_;
  std::uint64_t opened_epoch_ = 0;  // the state's epoch before this Open raised it
  // The deferred root writes, the evictions and the accesses, over the
  // members above (and each over the ones before it): declared after them,
  // so destroyed first. Set together by LoadState.
  std::unique_ptr<RootWriteQueue> roots_;
  std::unique_ptr<Evictor> evictor_;
  std::unique_ptr<AccessPath> access_;
};

}  // namespace s3oram

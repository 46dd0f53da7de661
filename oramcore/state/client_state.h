// The client's durable state: one SQLite database (WAL mode) per filesystem,
// sealed at rest (oramcore/state/state_file.h: a clear header with the wrapped
// master key, then pages encrypted under a subkey of it).
//
// It holds the filesystem's identity and parameters, the wrapped master key,
// the server addresses, the
// access counters (nr, ne, seq, epoch), the position map and the pending-
// operation log. Without the position map the servers' shares are noise, so
// every change goes through one SQLite transaction (Commit) and the file is
// refused if it is not a valid s3oram state of a known schema version.
//
// Crash rule: a mutation whose effect could be seen before the client records
// it (an eviction) is logged as a pending intent (AddPending, durable) before it
// is sent, and the intent is removed in the same transaction that records the
// effect (counters, positions). A root write is logged as pending only because
// it is deferred (sent with the next request, after its access returned): the
// slot it writes is free in the position map until it is recorded, and the
// client rewrites that slot consistently before its next retrieval
// (OramClient). See docs/ARCHITECTURE.md §Crash consistency.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "oramcore/base/ids.h"
#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/crypto/share_mac_secrets.h"
#include "oramcore/state/state_file.h"
#include "oramcore/tree/params.h"
#include "oramcore/tree/position_map.h"

struct sqlite3;

namespace s3oram {

struct FsConfig {
  FsId fs_id{};
  OramParams params;
  std::vector<std::string> servers;  // ZeroMQ endpoints, index = party index
  std::vector<std::string> server_keys;  // CURVE public key (Z85) of each server
  std::string client_key_file;       // this client's CURVE secret key (a private file)
  bool allow_unsafe = false;         // parameters below the overflow bound were forced
  KeyWrap key_wrap;                  // the master key, wrapped under the passphrase
};

struct Counters {
  std::uint64_t nr = 0;     // accesses since the last eviction (next root slot)
  std::uint64_t ne = 0;     // evictions committed
  std::uint64_t seq = 0;    // last mutation sequence number used
  std::uint64_t epoch = 0;  // client epoch
  bool operator==(const Counters&) const = default;
};

// The newest backup generation this state is known to equal: the one its
// last session uploaded when it ended (`epoch` = that session's epoch), or
// the one it was restored from. The state holds changes no backup has exactly
// when counters.epoch != epoch (a session that ended without an upload: a
// crash, fsck -y, a failed unmount backup). Absent in states older than it.
struct BackupMark {
  std::uint64_t generation = 0;
  std::uint64_t epoch = 0;
  bool operator==(const BackupMark&) const = default;
};

// The last problem a client met that only a repair of a server ends (a
// server reporting damaged storage, an eviction whose result was inconsistent
// across the servers), kept so that `s3oram status` can name it after the
// mount that met it has gone. Cleared by a rebuild and by a clean scrub.
// `damaged`: a server reported damaged storage (not an inconsistency); while
// such a note stands, a client evicts and writes nothing (OramClient).
struct ProblemNote {
  std::string text;
  std::uint64_t unix_seconds = 0;
  bool damaged = false;
  bool operator==(const ProblemNote&) const = default;
};

// A server the client stopped using (only with more than 2t + 1 servers):
// it was found down while the others could go on. Every root write and
// eviction since `since_eviction` (the state's ne when it was excluded) went
// to the others only, so its shares are stale: no request that reads or
// changes the tree goes to it until a catch-up (a mount's, or `s3oram
// rebuild --server`) or a rebuild brings it back, which removes the record.
// A catch-up keeps its buckets outside what the evictions since rewrote:
// only a server excluded for being down may be caught up. `suspect`: it
// was excluded for what it answered (damaged storage it reported, or a
// retrieval answer outvoted as wrong), so none of its kept buckets is
// trusted and only a full rebuild brings it back.
struct Exclusion {
  std::uint32_t server = 0;
  std::uint64_t since_eviction = 0;
  std::uint64_t unix_seconds = 0;
  std::string reason;
  bool suspect = false;
  bool operator==(const Exclusion&) const = default;
};

// A master-key rotation under way (`s3oram rekey`, oramcore/protocol/rekey.h).
// The state is already sealed under the new master key; the previous one is
// kept (rekey_old_master) so that blocks still sealed under it open, until
// every block was re-sealed (kReseal: by reading each through an ordinary
// access, in id order) and every bucket of the tree was rewritten by an
// eviction since (kPurge: no copy under the old key is left on any server).
struct RekeyProgress {
  enum class Phase : std::uint32_t { kReseal = 1, kPurge = 2 };
  Phase phase = Phase::kReseal;
  std::uint64_t next_block = 0;   // kReseal: blocks below it were re-sealed
  std::uint64_t purge_until = 0;  // kPurge: done once ne reaches it
  bool operator==(const RekeyProgress&) const = default;
};

struct PendingOp {
  std::uint64_t seq = 0;              // key; for kind "evict" the eviction number
  std::string kind;                   // kPendingEvictKind, kPendingRootKind or kPendingLagKind
  std::vector<std::uint8_t> payload;  // kind-specific
};

// An eviction under way: key = its number ne, payload = ne (u64) and the last
// attempt sent (u32), little-endian.
inline constexpr const char* kPendingEvictKind = "evict";
// The last accesses' deferred root writes (OramClient), for root slots nr,
// nr + 1, ... (several after pipelined accesses), each under the key
// kPendingRootKey + slot, which no eviction number reaches (a state from
// before pipelining holds at most one, under kPendingRootKey whatever its
// slot); payload = slot (u32), block id (u64),
// mapped (u8), new leaf (u64), new version (u64), m (u32), then the m packed
// sealed elements (u32 each), little-endian.
inline constexpr const char* kPendingRootKind = "root";
inline constexpr std::uint64_t kPendingRootKey = std::uint64_t{1} << 62;
// A root write that was recorded while a server had not acknowledged it yet
// (it lags, ServerSet::Wait::kQuorum), under kPendingLagKey + slot, with the
// payload of kind "root": Open rewrites its slot on every server, in case
// that server never applied it (RootWriteQueue::RepairLoggedLagging). An
// eviction's intent removes every such record (they are settled before it).
inline constexpr const char* kPendingLagKind = "lag";
inline constexpr std::uint64_t kPendingLagKey = std::uint64_t{3} << 61;
inline constexpr std::size_t PendingRootPayloadBytes(std::size_t elems_per_slot) {
  return 33 + 4 * elems_per_slot;
}

class ClientStateStore {
 public:
  // Creates a new state file sealed under `master` (whose wrap is
  // config.key_wrap); fails with AlreadyExists if `path` exists.
  static Result<std::unique_ptr<ClientStateStore>> Create(const std::string& path,
                                                          const FsConfig& config, Secret master);
  // Opens the database of an unlocked state file; fails with Corruption
  // (clear message, file untouched) if it is not a valid s3oram state.
  static Result<std::unique_ptr<ClientStateStore>> Open(std::shared_ptr<UnlockedState> state);
  ~ClientStateStore();
  ClientStateStore(const ClientStateStore&) = delete;
  ClientStateStore& operator=(const ClientStateStore&) = delete;

  const std::string& path() const { return path_; }
  const FsConfig& config() const { return config_; }
  // The unlocked file: its key and VFS, for other connections to it (the
  // filesystem's metadata, fsck, backups). Outlives this store if shared.
  const std::shared_ptr<UnlockedState>& unlocked() const { return state_; }
  const Counters& counters() const { return counters_; }
  // The seq of the newest durable commit (of the state as opened, at first):
  // what a power loss cannot take back.
  std::uint64_t durable_seq() const { return durable_seq_; }
  const std::optional<BackupMark>& backup_mark() const { return backup_mark_; }
  const std::optional<ProblemNote>& problem_note() const { return problem_note_; }
  // The servers excluded (ascending by server), if any.
  const std::vector<Exclusion>& exclusions() const { return exclusions_; }
  // The rotation under way, if any, and the previous master key it keeps
  // (empty when none).
  const std::optional<RekeyProgress>& rekey() const { return rekey_; }
  const Secret& rekey_old_master() const { return rekey_old_master_; }
  // The share MAC's secrets every slot written now is tagged under, and,
  // while a rotation is under way, the pair before it (slots not re-tagged
  // yet verify under that one). crypto/share_mac_secrets.h.
  const ShareMacSecrets& share_mac_secrets() const { return share_mac_; }
  const std::optional<ShareMacSecrets>& rekey_old_share_mac() const { return rekey_old_share_mac_; }
  // How long the servers took to compute the last background eviction, in
  // ms (what paces the accesses beside the next one); 0 before any.
  std::uint64_t eviction_estimate_ms() const { return eviction_estimate_ms_; }

  // Reads every position row into a fresh map (validating each row).
  Result<PositionMap> LoadPositionMap() const;
  Result<std::vector<PendingOp>> LoadPending() const;

  // A set of changes applied atomically by Commit.
  class Batch {
   public:
    void SetCounters(const Counters& c) { counters_ = c; }
    void PutPosition(BlockId id, const PositionEntry& e) { puts_.push_back({id, e}); }
    void ErasePosition(BlockId id) { erases_.push_back(id); }
    void AddPending(PendingOp op) { add_pending_.push_back(std::move(op)); }
    void RemovePending(std::uint64_t seq) { remove_pending_.push_back(seq); }
    void SetBackupMark(const BackupMark& m) { backup_mark_ = m; }
    // Sets (a value) or clears (nullopt) the problem note.
    void SetProblemNote(std::optional<ProblemNote> n) { problem_note_ = std::move(n); }
    void SetEvictionEstimate(std::uint64_t ms) { eviction_estimate_ms_ = ms; }
    // Records (replacing one for the same server) or removes an exclusion.
    void Exclude(const Exclusion& e) { exclude_.push_back(e); }
    void Readmit(std::uint32_t server) { readmit_.push_back(server); }
    // Advances a rotation under way (the state must record one).
    void SetRekeyProgress(const RekeyProgress& r) { rekey_progress_ = r; }
    // Ends it: the previous master key is erased from the state (its page
    // overwritten: secure_delete) and the schema marker goes back.
    void EndRekey() { end_rekey_ = true; }
    bool empty() const;

   private:
    friend class ClientStateStore;
    std::optional<Counters> counters_;
    std::vector<std::pair<BlockId, PositionEntry>> puts_;
    std::vector<BlockId> erases_;
    std::vector<PendingOp> add_pending_;
    std::vector<std::uint64_t> remove_pending_;
    std::optional<BackupMark> backup_mark_;
    std::optional<std::optional<ProblemNote>> problem_note_;
    std::optional<std::uint64_t> eviction_estimate_ms_;
    std::vector<Exclusion> exclude_;
    std::vector<std::uint32_t> readmit_;
    std::optional<RekeyProgress> rekey_progress_;
    bool end_rekey_ = false;
  };

  // Replaces the wrapped master key (passphrase change) durably, in place in
  // the state header's two copies (UnlockedState::ReplaceKeyWrap): the old
  // wrap is overwritten, and nothing else changes.
  Status ReplaceKeyWrap(const KeyWrap& wrap);

  // Replaces what belongs to one machine rather than to the filesystem: the
  // server endpoints, their CURVE public keys and the client key file (a
  // restored state on a new machine). Same number of servers as before, in
  // party order. One durable transaction; config() follows.
  Status ReplaceMachineConfig(const std::vector<std::string>& servers,
                              const std::vector<std::string>& server_keys,
                              const std::string& client_key_file);

  // One transaction. durable = true waits for the data to reach stable storage
  // (synchronous=FULL); otherwise the commit survives a process crash but maybe
  // not a power loss (WAL, synchronous=NORMAL).
  Status Commit(const Batch& batch, bool durable = false);

 private:
  ClientStateStore() = default;
  // Open's steps: each reads one kind of row into the members and checks it
  // (Corruption naming what is wrong; Open adds the path).
  Status ReadMeta(sqlite3* db, std::int64_t schema_version);
  Status ReadServers(sqlite3* db);
  Status ReadCounters(sqlite3* db);
  Status ReadEvictionEstimate(sqlite3* db);
  Status ReadBackupMark(sqlite3* db);
  Status ReadProblemNote(sqlite3* db);
  Status ReadExclusions(sqlite3* db);
  Status ReadRekey(sqlite3* db, bool rekeying);
  Status ReadShareMacSecrets(sqlite3* db, bool rekeying, std::int64_t schema_version);
  std::string path_;
  std::shared_ptr<UnlockedState> state_;  // released after ~ClientStateStore closes db_
  sqlite3* db_ = nullptr;
  FsConfig config_;
  Counters counters_;
  std::uint64_t durable_seq_ = 0;
  std::optional<BackupMark> backup_mark_;
  std::optional<ProblemNote> problem_note_;
  std::vector<Exclusion> exclusions_;
  std::uint64_t eviction_estimate_ms_ = 0;
  std::optional<RekeyProgress> rekey_;
  Secret rekey_old_master_;
  std::int64_t schema_version_ = 0;
  ShareMacSecrets share_mac_;
  std::optional<ShareMacSecrets> rekey_old_share_mac_;
};

// Writes the rows that start a rotation into `db`, a fresh copy of a state
// about to be sealed under a new master key (oramcore/state/master_key_switch.h):
// the previous master key, phase kReseal from block 0, the share MAC's
// secrets with one half replaced and the pair before them kept, and the
// schema marker that makes a build without rekey support (or without stored
// share MAC secrets) refuse the file. Inside the caller's transaction.
Status WriteRekeyStart(sqlite3* db, const Secret& old_master);

}  // namespace s3oram

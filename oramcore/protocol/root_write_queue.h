// RootWriteQueue: the root writes the client's accesses leave for later
// requests to carry (client.h, "One round trip per access"), and whether
// root slot nr may hold an inconsistent sharing.
//
// An access writes its block to the next free root slot, but not at once:
// the write is deferred to the next request, which carries it
// (RETRIEVE_WRITE_ROOT), or is sent alone (WRITE_ROOT) by a Sync, a Close
// or before an eviction, which reads the whole root. The queue holds those
// writes, for slots nr, nr + 1, ... in order (at most
// OramClient::kMaxPipelined of them), each one logged in the state as a
// pending operation of kind "root" under kPendingRootKey + slot.
//
// Guarantees: an entry leaves the queue only once every server acknowledged
// its write and one durable transaction recorded it (nr + 1, the block's new
// position, the pending record removed); a failed send leaves it queued and
// logged, and marks slot nr dirty. While dirty() the next retrieval must not
// read the root before slot nr was rewritten completely on every server
// (PrepareRetrievals): a slot whose servers disagree turns every retrieval
// through it into garbage. Every Open starts dirty. Not thread-safe (the
// client serialises).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/field.h"
#include "oramcore/protocol/client_session.h"
#include "oramcore/protocol/client_stats.h"
#include "oramcore/state/client_state.h"
#include "oramcore/tree/position_map.h"

namespace s3oram {

class RootWriteQueue {
 public:
  // One deferred root write: slot `slot` gets `elems` (the sealed block,
  // packed), and once every server has it the block (if `mapped`) moves to
  // `moved`.
  struct Entry {
    std::uint64_t key = 0;  // in the state: kPendingRootKey + slot
    std::uint32_t slot = 0;
    BlockId id = 0;
    bool mapped = false;
    PositionEntry moved;
    std::vector<field::Elem> elems;
  };

  // All referenced objects outlive the queue.
  RootWriteQueue(ClientSession& session, PositionMap& pm, ClientStats& stats)
      : session_(session), pm_(pm), stats_(stats) {}

  bool empty() const { return entries_.empty(); }
  std::size_t size() const { return entries_.size(); }
  // Entry x: the write for root slot nr + x.
  const Entry& operator[](std::size_t x) const { return entries_[x]; }
  const Entry& back() const { return entries_.back(); }
  // The index of the newest queued write of block `id` that gives it a
  // copy, if any.
  std::optional<std::size_t> NewestOf(BlockId id) const;
  // Whether the root's last slot is taken: nothing more fits before an eviction.
  bool fills_root() const {
    return !entries_.empty() && entries_.back().slot + 1 >= session_.params().evict_rate;
  }

  // Slot nr may hold an inconsistent sharing.
  bool dirty() const { return dirty_; }
  void MarkDirty() { dirty_ = true; }

  // The record that logs `e` in the state, and back: a logged record
  // expected for root slot `slot`, every field checked against this
  // filesystem (Corruption otherwise).
  static std::vector<std::uint8_t> Encode(const Entry& e);
  Result<Entry> Decode(const std::vector<std::uint8_t>& payload, std::uint64_t slot) const;

  // Open: queues the root writes the state logged (sorted by slot, each one
  // checked to follow nr in turn) and sends them, which rewrites those slots
  // completely: also the repair every Open needs.
  Status ResendLogged();
  // Before a retrieval reads the root while dirty(): sends the queued writes
  // alone when there are several (the retrieval would read the later
  // slots), and rewrites slot nr with a fresh sharing of zeros when none is
  // queued. One queued write is left to the retrieval that carries it.
  Status PrepareRetrievals();
  // Sends every queued write alone (WRITE_ROOT, back to back in slot order)
  // and records those every server acknowledged, up to the first that
  // failed, in one durable transaction.
  Status Flush();

  // A request of a chunk: its seq, and the servers that lag on it (had not
  // answered when the chunk's exchange returned, ServerSet::Wait::kQuorum).
  struct LagNote {
    std::uint64_t seq = 0;
    std::vector<std::size_t> servers;  // lagging: their answers may still come
    // Failed it (silent, found down) while 2t + 1 others answered: they do
    // not hold the write.
    std::vector<std::size_t> failed;
  };
  // For a chunk of accesses that carried the first `carried` of
  // `carrying` queued writes on its retrievals (answered by every server,
  // or by 2t + 1 with the others lagging: lags[x] for write x): adds what
  // records them as done to `batch`, moving nr in `next`. A carried write
  // that did not reach every server leaves slot nr dirty; one that some
  // server lags on is recorded as done and logged as lagging
  // (kPendingLagKind) until that server acknowledged it (SettleLagging).
  void RecordCarried(std::size_t carried, std::size_t carrying, const std::vector<LagNote>& lags,
                     ClientStateStore::Batch& batch, Counters& next);

  // --- Writes a server lags on. ------------------------------------------------
  // Guarantees: a lagging write leaves this queue's care only once every
  // lagging server acknowledged it, or it was rewritten afresh on every
  // server (its slot then consistent again); its record in the state goes
  // with it, and no eviction starts before (Evictor::StartEviction settles
  // first, and its intent drops the records). A crash before that leaves
  // the record for Open (RepairLoggedLagging).
  //
  // Its end: acknowledged (a reply of the expected type) or not.
  void LagEnded(std::size_t server, std::uint64_t seq, bool acknowledged);
  // Takes the ends the servers sent (and, if `wait`, waits for every
  // lagging write's, so that none is left lagging after an OK), rewrites
  // every lagging write some server failed, and forgets those settled. An error: a rewrite failed
  // (the write stays lagging, and the next call tries again).
  Status SettleLagging(bool wait);
  // Where every lagging request's end this queue takes goes besides (the
  // access path checks a late retrieval answer).
  using LateReplySink = std::function<void(const ServerSet::Lagged&)>;
  void SetLateReplySink(LateReplySink sink) { late_reply_ = std::move(sink); }
  // Whether a write is lagging still.
  bool lagging() const { return !lagging_.empty(); }
  // Open: every write the state logs as lagging is rewritten on every
  // server (its server may never have applied it), then its record goes.
  Status RepairLoggedLagging();
  // After that batch committed: the first `carried` entries leave the
  // queue, their blocks take their new positions; `next` becomes the
  // counters. The first error is returned, after all of them were applied.
  Status CarriedCommitted(std::size_t carried, const Counters& next);
  // Queues the write an access left; its record was committed with the access.
  void Push(Entry e) { entries_.push_back(std::move(e)); }

 private:
  // Adds to `batch` what records `e` as done: nr + 1, the block's new
  // position, the pending record removed.
  void RecordWritten(const Entry& e, ClientStateStore::Batch& batch, Counters& next) const;
  // Applies a committed RecordWritten of the oldest entry in memory.
  Status OldestCommitted(const Counters& next);
  // The oldest entry alone: WRITE_ROOT, then its durable record.
  Status FlushOldest();
  // Slot `slot` := a fresh sharing of `elems` on every participant
  // (WRITE_ROOT). A participant that does not acknowledge it and is found
  // down is excluded if the others can go on without it
  // (ClientSession::ExcludeDown), and the slot is written afresh on them.
  Status WriteRoot(std::uint32_t slot, std::span<const field::Elem> elems);
  Status WriteRootOnce(std::uint32_t slot, std::span<const field::Elem> elems);
  // After `failure` of a root write: whether a server found down was
  // excluded, so that the write goes again to the others.
  Result<bool> ExcludedAfter(const Status& failure, std::uint32_t slot);
  // Slot nr rewritten with a fresh sharing of zeros.
  Status Repair();

  ClientSession& session_;
  PositionMap& pm_;
  ClientStats& stats_;
  std::deque<Entry> entries_;
  bool dirty_ = true;

  struct LaggingWrite {
    std::uint64_t seq = 0;
    std::vector<std::size_t> owing;      // servers that have not acknowledged it yet
    std::vector<std::size_t> failed_on;  // servers that failed it
    Entry entry;
  };
  std::vector<LaggingWrite> lagging_;            // recorded, in slot order
  std::vector<LaggingWrite> staged_;             // RecordCarried's, until CarriedCommitted
  LateReplySink late_reply_;
};

}  // namespace s3oram

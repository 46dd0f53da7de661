// AccessPath: the client's accesses (Protocol 2 of the paper), single and
// pipelined; client.h states the protocol and its guarantees.
//
// A call of AccessMany runs its items as chunks of up to kMaxPipelined
// accesses; each chunk is one pipelined exchange, in steps
// (access_chunk.cpp):
//   BeforeChunk      the chores first: a full root flushed, the eviction due
//                    run, the one in flight started, root slot nr repaired;
//   PlanChunk        where each block is: on the servers (as they will be
//                    when the retrieval arrives), in a queued root write, in
//                    the client's root copies, or an earlier item's result;
//   BuildRetrievals  fresh random select shares for each path, each request
//                    carrying one queued root write;
//   SendRetrievals   one pipelined exchange; the root writes every server
//                    acknowledged are recorded; with more than 2t + 1
//                    servers it ends once 2t + 1 answered each retrieval,
//                    and a slower server lags: its answers are awaited only
//                    when the first ones do not verify, and the root writes
//                    it has not acknowledged stay lagging in the root write
//                    queue (RootWriteQueue::SettleLagging);
//   FinishAccess     per access, in order: recover and authenticate
//                    (RecoverAccess), then re-seal under the next version and
//                    queue its root write (ResealAccess);
//   RecordChunk      one durable transaction, then memory;
//   EndRoundIfFull   the root's last slot written: the queued writes go,
//                    then the eviction.
// What the chunk's steps leave for each other is its Chunk, not members of
// this class; between chunks, the access path keeps only the exposures
// below. The deferred root writes are a RootWriteQueue, the evictions an
// Evictor, the keys a BlockCodec (all owned by OramClient).
//
// Retries that reveal nothing (docs/SECURITY.md, "Failed accesses"). A
// retrieval of a block's path that went out but whose access did not
// complete (integrity failure, a server's error or silence, a spoilt
// pipelined answer, a failed commit) leaves the block where it was: its
// leaf is exposed, and the block's own next access would retrieve the same
// path, telling a server that caused the failure which later access is the
// retry. Instead, before anything else, the next chunk reads every exposed
// block back along its exposed path (a cleanup read, an ordinary access
// that moves the block to the root under a fresh leaf), whatever the caller
// asks next; so the repeat follows the failure alone. A read-back that
// fails is tried again at once; after kCleanupAttempts failed read-backs in
// a row the block is quarantined for this client's life: reads and updates
// of it fail without a retrieval, a whole-block write replaces it along a
// fresh random path (a blind write).
//
// Not thread-safe: one call at a time (OramClient's callers serialise).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/field.h"
#include "oramcore/math/robust_decode.h"
#include "oramcore/protocol/client_session.h"
#include "oramcore/protocol/client_stats.h"
#include "oramcore/protocol/evictor.h"
#include "oramcore/protocol/root_copies.h"
#include "oramcore/protocol/root_write_queue.h"
#include "oramcore/tree/position_map.h"

namespace s3oram {

enum class AccessOp { kRead, kWrite };

class AccessPath {
 public:
  // See OramClient::Update.
  using BlockModifier = std::function<void(std::span<std::uint8_t>)>;
  // See OramClient::AccessMany.
  struct BatchItem {
    AccessOp op = AccessOp::kRead;
    BlockId id = 0;
    std::span<const std::uint8_t> data;     // kWrite without modify: block_bytes()
    const BlockModifier* modify = nullptr;  // an update (op is then kWrite)
  };
  static constexpr std::size_t kMaxPipelined = 8;
  // See OramClient::ChunkGate.
  using ChunkGate = std::function<std::size_t(std::size_t remaining)>;

  // `decoder`: recovers a retrieval's degree-2t answer from the servers'
  // answers, outvoting a wrong one when there are more than 2t + 1;
  // `root_copies`: null when read-only. All referenced objects outlive the
  // access path.
  AccessPath(ClientSession& session, PositionMap& pm, ClientStats& stats,
             const shamir::RobustDecoder& decoder, RootWriteQueue& roots, Evictor& evictor,
             RootCopies* root_copies)
      : session_(session),
        pm_(pm),
        stats_(stats),
        decoder_(decoder),
        roots_(roots),
        evictor_(evictor),
        root_copies_(root_copies) {
    roots_.SetLateReplySink([this](const ServerSet::Lagged& end) { CheckLateAnswer(end); });
  }

  // OramClient::AccessMany: results[i] is items[i]'s.
  std::vector<Result<std::vector<std::uint8_t>>> AccessMany(std::span<const BatchItem> items,
                                                            const ChunkGate& gate);

 private:
  // The chores before accesses, then up to kMaxPipelined of `items` (all
  // valid) as one pipelined exchange; results appended to `out`, one per
  // item it finished, in order. It may stop early without an error (an
  // item that repeats one that failed; a pipelined access spoilt by
  // resends): the caller goes on from there. An error: the servers could
  // not be reached (or refused): the item after the finished ones fails
  // with it.
  Status RunChunk(std::span<const BatchItem> items,
                  std::vector<Result<std::vector<std::uint8_t>>>& out);
  // RunChunk's steps, in order (defined with Chunk in access_chunk.cpp).
  struct Chunk;
  struct AccessWork;
  enum class AccessEnd : std::uint8_t {
    kNext,       // this access is finished (done or refused): go on with the next
    kStopChunk,  // stop here; the caller goes on from this access (or fails with chunk_error)
  };
  Status BeforeChunk();
  Status PlanChunk(Chunk& c);
  // Plans access j; false: the in-flight eviction was committed early for
  // it, and the whole chunk is planned again.
  Result<bool> PlanAccess(Chunk& c, std::size_t j);
  Status BuildRetrievals(Chunk& c);
  void SendRetrievals(Chunk& c);
  AccessEnd FinishAccess(Chunk& c, std::size_t j);
  AccessEnd RecoverAccess(Chunk& c, std::size_t j, AccessWork& w);
  // One request's answers as the chunk keeps them (RepliesOf: a lagging
  // server's is nullopt, noted in `lag` and counted; so is a silent one's
  // while 2t + 1 others answered, noted as failed), or its failure.
  Result<std::vector<std::optional<wire::Message>>> RepliesOf(ServerSet::Answers answers,
                                                              RootWriteQueue::LagNote& lag);
  // Waits for the answers of the servers lagging on request j (their ends
  // go to the root write queue); whether any answer came.
  bool AwaitLagging(Chunk& c, std::size_t j);
  // Access j's answers, one per server (null for a lagging one), each
  // checked to be a whole slot (else the chunk stops with a protocol error).
  std::optional<std::vector<const field::Elem*>> AnswersOf(Chunk& c, std::size_t j);
  // A retrieval that selected nothing must open to zero: with more than
  // 2t + 1 servers a wrong answer to it is found and named too.
  AccessEnd CheckSelectsNothing(Chunk& c, std::size_t j);
  // Counts and reports the servers whose answer to access j was off the
  // polynomial the others verified.
  void NoteWrongAnswers(const Chunk& c, std::size_t j, const shamir::RobustDecoder::Outcome& o);
  // The same for any outcome: named unless `resent` (block `id`, for the log).
  void NoteWrong(const shamir::RobustDecoder::Outcome& o, bool resent, BlockId id);
  // Keeps what checks a lagging server's answer to access j when it comes:
  // the answers that decoded it and the secrets they gave (verified).
  void KeepForLateCheck(const Chunk& c, std::size_t j,
                        const std::vector<const field::Elem*>& answers,
                        std::span<const field::Elem> secrets);
  // A lagging server's answer (RootWriteQueue hands every end here): off the
  // polynomial the first answers verified, it is counted and its server
  // named, as a wrong answer that came in time is.
  void CheckLateAnswer(const ServerSet::Lagged& end);
  AccessEnd ResealAccess(Chunk& c, std::size_t j, AccessWork& w);
  Status RecordChunk(Chunk& c, std::vector<Result<std::vector<std::uint8_t>>>& out);
  // The root's last slot written: the queued root writes, then the eviction.
  void EndRoundIfFull(BlockId last_access);
  // The client's copy of block `id`, written to root slot at.pos.slot in the
  // round the eviction in flight moves out, if it authenticates as version
  // at.version; nullopt otherwise.
  std::optional<std::vector<field::Elem>> RootCopyOf(BlockId id, const PositionEntry& at) const;

  // The exposures (see the file comment; access_path.cpp).
  struct Exposed {
    BlockId id = 0;
    LeafId leaf = 0;
    std::uint32_t attempts = 0;  // cleanup reads that failed
    Status why;                  // the last failure
  };
  static constexpr std::uint32_t kCleanupAttempts = 2;
  // The refusal of item `it` before any access, if any: an id beyond the
  // capacity, a write of the wrong size, writes stopped, a quarantined block.
  Status Refusal(const BatchItem& it) const;
  const Status* Quarantined(const BatchItem& b) const;
  // A failure the servers answered with (a lie, damaged storage, a
  // malformed answer, any error reply): a cleanup that meets one counts an
  // attempt and goes on; a silence, a fence or this machine's own I/O error
  // stops the cleanup and the chunk, and the exposures wait for the next.
  static bool IsAnsweredFailure(const Status& st);
  // Runs the cleanup reads of exposed_; an error: the servers could not be
  // reached (the exposures stay for the next chunk).
  Status CleanUpExposed();
  // How each access of a chunk ended, for NoteExposures.
  enum class Outcome : std::uint8_t {
    kCompleted,   // recorded: the block has a fresh position
    kRefused,     // the servers answered and the access failed (integrity)
    kUnanswered,  // no usable answer (a server's error or silence, resends, a failed commit)
  };
  // For each access j of a chunk whose retrieval revealed the path
  // revealed[j] (0: none, a random path) and did not complete: exposed_
  // gains it; during a cleanup a kRefused one counts a failed attempt.
  // Completed ones leave exposed_ and quarantined_ (a blind write).
  void NoteExposures(std::span<const BatchItem> items, const std::vector<LeafId>& revealed,
                     const std::vector<Outcome>& outcomes, const Status& why);

  const OramParams& params() const { return session_.params(); }

  ClientSession& session_;
  PositionMap& pm_;
  ClientStats& stats_;
  const shamir::RobustDecoder& decoder_;
  RootWriteQueue& roots_;
  Evictor& evictor_;
  RootCopies* const root_copies_;

  std::vector<Exposed> exposed_;  // in the order their retrievals went out
  // Quarantined blocks, with the failure of their last cleanup read.
  std::unordered_map<BlockId, Status> quarantined_;
  std::string last_wrong_answer_note_;  // logged once while it repeats
  // A retrieval decoded without some lagging server's answer, until every
  // one of them came or failed (bounded: ServerSet::kMaxLagging per server).
  struct LateCheck {
    std::vector<std::vector<field::Elem>> answers;  // per server; empty: none
    std::vector<field::Elem> secrets;
    std::size_t awaiting = 0;   // lagging servers still to answer
    bool resent = false;        // its chunk met resends
    std::uint64_t resends = 0;  // the transport's count when it was decoded
    BlockId id = 0;
  };
  std::unordered_map<std::uint64_t, LateCheck> late_checks_;  // by the request's seq
  bool cleaning_ = false;  // CleanUpExposed is running cleanup reads
  // Set by SendRetrievals once a chunk's retrievals went out: an error after
  // that is the servers' answer to them, one before it is not.
  bool chunk_sent_ = false;
  bool early_commit_logged_ = false;
};

}  // namespace s3oram

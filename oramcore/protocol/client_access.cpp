// OramClient's accesses: single and pipelined (Protocol 2 of the paper, one
// retrieval and one root write per access), and the deferred root writes
// they leave. See client.h for the protocol and its guarantees.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <string>

#include "oramcore/base/fault_point.h"
#include "oramcore/base/random.h"
#include "oramcore/math/field.h"
#include "oramcore/math/share_mac.h"
#include "oramcore/protocol/client.h"
#include "oramcore/protocol/client_internal.h"

namespace s3oram {

using field::Elem;
using namespace client_internal;

Status OramClient::RepairRootSlot() {
  std::vector<Elem> zeros(params().elems_per_slot(), 0);
  S3ORAM_RETURN_IF_ERROR(
      WriteRoot(static_cast<std::uint32_t>(session_->counters().nr), zeros)
          .WithContext("rewriting root slot " + std::to_string(session_->counters().nr)));
  root_slot_dirty_ = false;
  return Status::Ok();
}

std::vector<std::uint8_t> OramClient::EncodeRootPayload(const PendingRoot& r) {
  std::vector<std::uint8_t> out;
  out.reserve(PendingRootPayloadBytes(r.elems.size()));
  auto put = [&out](std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  };
  put(r.slot, 4);
  put(r.id, 8);
  put(r.mapped ? 1 : 0, 1);
  put(r.moved.pos.leaf, 8);
  put(r.moved.version, 8);
  put(r.elems.size(), 4);
  for (Elem e : r.elems) put(e, 4);
  return out;
}

Result<OramClient::PendingRoot> OramClient::DecodeRootPayload(const std::vector<std::uint8_t>& p,
                                                              std::uint64_t slot) const {
  const OramParams& params_ = params();
  const std::size_t m = params_.elems_per_slot();
  if (p.size() != PendingRootPayloadBytes(m)) {
    return Status::Corruption("pending root write record has " + std::to_string(p.size()) +
                              " bytes, expected " + std::to_string(PendingRootPayloadBytes(m)));
  }
  std::size_t at = 0;
  auto get = [&p, &at](int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= std::uint64_t{p[at++]} << (8 * i);
    return v;
  };
  PendingRoot r;
  r.slot = static_cast<std::uint32_t>(get(4));
  r.id = get(8);
  const std::uint64_t mapped = get(1);
  r.moved.pos.leaf = get(8);
  r.moved.version = get(8);
  const std::uint64_t n = get(4);
  const TreeGeometry geo = params_.geometry();
  if (mapped > 1 || n != m || r.slot != slot || r.slot >= params_.evict_rate ||
      r.id >= params_.capacity_blocks || (mapped == 1 && !geo.is_leaf(r.moved.pos.leaf))) {
    return Status::Corruption("pending root write record does not match this filesystem (slot " +
                              std::to_string(r.slot) + ", expected root slot " +
                              std::to_string(slot) + ")");
  }
  r.mapped = mapped == 1;
  r.moved.pos.level = 0;
  r.moved.pos.slot = r.slot;
  r.elems.resize(m);
  for (Elem& e : r.elems) {
    e = static_cast<Elem>(get(4));
    if (e >= field::kPrime)
      return Status::Corruption("pending root write record holds a bad element");
  }
  return r;
}

void OramClient::RecordRootWritten(const PendingRoot& root, ClientStateStore::Batch& batch,
                                   Counters& next) const {
  next.nr = root.slot + 1;
  batch.SetCounters(next);
  if (root.mapped) batch.PutPosition(root.id, root.moved);
  batch.RemovePending(root.key);
}

Status OramClient::RootWrittenCommitted(const Counters& next) {
  PendingRoot root = std::move(pending_roots_.front());
  pending_roots_.pop_front();
  session_->counters() = next;
  ++stats_.accesses;
  if (root.mapped) return pm_->Place(root.id, root.moved.pos, root.moved.version);
  return Status::Ok();
}

Status OramClient::FlushPendingRoot() {
  if (pending_roots_.empty()) return Status::Ok();
  // A complete write of slot nr on every server also repairs it.
  if (Status st = WriteRoot(pending_roots_.front().slot, pending_roots_.front().elems); !st.ok()) {
    root_slot_dirty_ = true;
    return st;
  }
  // Slots after it that a failed pipelined exchange may have touched stay
  // to be rewritten by their own flush.
  if (pending_roots_.size() == 1) root_slot_dirty_ = false;
  FaultPoint("client.access.after_write_root");
  ClientStateStore::Batch batch;
  Counters next = session_->counters();
  RecordRootWritten(pending_roots_.front(), batch, next);
  {
    TimeInto timer(stats_.timings.state_commit_ns);
    S3ORAM_RETURN_IF_ERROR(session_->store().Commit(batch, /*durable=*/true));
  }
  return RootWrittenCommitted(next);
}

Status OramClient::FlushPendingRoots() {
  if (pending_roots_.size() <= 1) return FlushPendingRoot();
  // Several (pipelined accesses): their WRITE_ROOTs go back to back, in slot
  // order, and the ones every server acknowledged, up to the first that
  // failed, are recorded in one transaction.
  const OramParams& p = params();
  const std::size_t k = pending_roots_.size();
  S3ORAM_ASSIGN_OR_RETURN(std::vector<wire::Header> headers, session_->NextMutationHeaders(k));
  std::vector<ServerSet::Outgoing> requests(k);
  {
    TimeInto timer(stats_.timings.client_compute_ns);
    std::vector<std::vector<Elem>> shares(p.parties);
    for (std::size_t j = 0; j < k; ++j) {
      ShareVector(pending_roots_[j].elems, p.threshold, shares);
      requests[j].header = headers[j];
      requests[j].expected_reply = wire::MessageType::kWriteRootReply;
      for (auto& share : shares) {
        requests[j].frames.push_back(wire::Encode(
            headers[j],
            wire::Body{wire::WriteRootRequest{pending_roots_[j].slot, std::move(share)}}));
        share = {};
      }
    }
  }
  std::vector<Result<std::vector<wire::Message>>> replies;
  {
    TimeInto timer(stats_.timings.root_write_wait_ns);
    std::vector<std::size_t> all(p.parties);
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    replies = session_->servers().ExchangeSequence(all, requests, session_->options().requests);
  }
  std::size_t written = 0;
  while (written < k && replies[written].ok()) ++written;
  root_slot_dirty_ = written < k;
  if (written > 0) {
    FaultPoint("client.access.after_write_root");
    ClientStateStore::Batch batch;
    Counters next = session_->counters();
    for (std::size_t j = 0; j < written; ++j) RecordRootWritten(pending_roots_[j], batch, next);
    {
      TimeInto timer(stats_.timings.state_commit_ns);
      S3ORAM_RETURN_IF_ERROR(session_->store().Commit(batch, /*durable=*/true));
    }
    for (std::size_t j = 0; j < written; ++j) S3ORAM_RETURN_IF_ERROR(RootWrittenCommitted(next));
  }
  if (written < k) return replies[written].status();
  return Status::Ok();
}

Result<std::vector<std::uint8_t>> OramClient::Access(AccessOp op, BlockId id,
                                                     std::span<const std::uint8_t> data) {
  const BatchItem item{op, id, data, nullptr};
  return std::move(AccessMany(std::span<const BatchItem>(&item, 1))[0]);
}

Result<std::vector<std::uint8_t>> OramClient::Update(BlockId id, const BlockModifier& modify) {
  const BatchItem item{AccessOp::kWrite, id, {}, &modify};
  return std::move(AccessMany(std::span<const BatchItem>(&item, 1))[0]);
}

std::vector<Result<std::vector<std::uint8_t>>> OramClient::AccessMany(
    std::span<const BatchItem> items, const ChunkGate& gate) {
  std::vector<Result<std::vector<std::uint8_t>>> out;
  out.reserve(items.size());
  auto fail_rest = [&](const Status& st) {
    while (out.size() < items.size()) out.emplace_back(st);
    return std::move(out);
  };
  // Checked before every chunk: a gate may have let a Close (or an access
  // that learnt of a fence) run in between.
  auto unusable = [&]() -> std::optional<Status> {
    if (session_->fenced()) {
      return Status::LeaseHeld(
          "this client was fenced off: another client took the filesystem's lease over, so this "
          "one can no longer read or change anything");
    }
    if (session_->read_only()) return Status::FailedPrecondition("client opened read-only");
    if (!session_->lease_held()) return Status::FailedPrecondition("client closed");
    return std::nullopt;
  };
  if (auto st = unusable()) return fail_rest(*st);
  const OramParams& p = params();
  std::size_t next = 0;
  // A chunk that finished nothing (an access to try again alone) is
  // followed by one of a single access, which always finishes or fails.
  std::size_t limit = kMaxPipelined;
  auto quarantined = [&](const BatchItem& b) -> const Status* {
    if (quarantined_.empty() || (b.op == AccessOp::kWrite && !b.modify)) return nullptr;
    const auto q = quarantined_.find(b.id);
    return q == quarantined_.end() ? nullptr : &q->second;
  };
  while (next < items.size()) {
    // Paths exposed by a failed access are read back first, whatever comes
    // next (see exposed_).
    if (!exposed_.empty()) {
      if (Status st = CleanUpExposed(); !st.ok()) return fail_rest(session_->NoteFencing(st));
      if (auto st = unusable()) return fail_rest(*st);
      // Every exposure ends in a cleanup that returns OK (read back or
      // quarantined); should one not, nothing else may go before it.
      if (!exposed_.empty()) {
        return fail_rest(Status::Unavailable("a block's read-back after a failed access did not "
                                             "finish; try again"));
      }
    }
    // An item refused before any access (bad id or size, writes stopped, a
    // quarantined block) fails alone; a chunk stops before it.
    const BatchItem& it = items[next];
    Status refused = Status::Ok();
    if (it.id >= p.capacity_blocks) {
      refused =
          Status::InvalidArgument("block " + std::to_string(it.id) + " is beyond the capacity of " +
                                  std::to_string(p.capacity_blocks) + " blocks");
    } else if (it.op == AccessOp::kWrite && !it.modify && it.data.size() != p.block_bytes) {
      refused = Status::InvalidArgument("a write carries exactly " + std::to_string(p.block_bytes) +
                                        " bytes, got " + std::to_string(it.data.size()));
    } else if (it.op == AccessOp::kWrite && session_->writes_stopped()) {
      refused = *session_->writes_stopped();
    } else if (const Status* why = quarantined(it)) {
      // The code of the failure (integrity, damaged storage ...), so that
      // callers treat it as they treated the failure itself.
      refused = why->WithContext(
          "block " + std::to_string(it.id) + " is quarantined: its path failed " +
          std::to_string(kCleanupAttempts + 1) +
          " retrievals in a row, and retrieving it again would tell the servers which access "
          "retries it; it stays unreadable until the filesystem is opened again, and writing "
          "the block whole replaces it. Last failure");
    }
    if (!refused.ok()) {
      out.emplace_back(refused);
      ++next;
      continue;
    }
    std::size_t most = limit;
    if (gate) {
      most = std::clamp<std::size_t>(gate(items.size() - next), 1, limit);
      if (auto st = unusable()) return fail_rest(*st);
      // The gate may have let another caller's access fail and expose a
      // path: its read-back comes before this chunk (back to the top).
      if (!exposed_.empty()) continue;
      if (it.op == AccessOp::kWrite && session_->writes_stopped()) {  // stopped in between
        out.emplace_back(*session_->writes_stopped());
        ++next;
        continue;
      }
    }
    std::size_t valid = next + 1;
    while (valid < items.size() && valid - next < most) {
      const BatchItem& v = items[valid];
      if (v.id >= p.capacity_blocks) break;
      if (v.op == AccessOp::kWrite &&
          (session_->writes_stopped() || (!v.modify && v.data.size() != p.block_bytes)))
        break;
      if (quarantined(v)) break;
      ++valid;
    }
    const std::size_t before = out.size();
    const std::size_t given = valid - next;
    Status st = RunChunk(items.subspan(next, given), out);
    const std::size_t finished = out.size() - before;
    next += finished;
    // A chunk that finished fewer than it was given (an access spoilt by
    // resends, one repeating an access that failed, or the end of the
    // root's slots) is followed by one of the next access alone, which
    // always finishes or fails.
    limit = finished < given ? 1 : kMaxPipelined;
    if (!st.ok()) {
      st = session_->NoteFencing(st);
      return fail_rest(st);
    }
  }
  for (auto& r : out) {
    if (!r.ok()) r = session_->NoteFencing(r.status());
  }
  return out;
}

// One pipelined chunk of accesses as RunChunk's steps see it: what each step
// leaves for the next. Plan (where each block is) → BuildRetrievals (the
// select and root shares) → SendRetrievals (one pipelined exchange, the root
// writes it carried recorded) → FinishAccess for each access in order
// (recover and authenticate, re-seal, log the root write) → RecordChunk (one
// durable transaction, then memory) → EndRoundIfFull.
struct OramClient::Chunk {
  // Where access j finds its block, decided before anything is sent.
  struct Plan {
    std::optional<PositionEntry> where;         // its copy on the servers (as they will be)
    std::optional<std::size_t> repeat_of;       // an earlier item of this chunk
    std::optional<std::vector<Elem>> own_copy;  // served from the client's copy
    std::uint64_t own_version = 0;              // the version own_copy is sealed under
    LeafId leaf = 0;                            // the path retrieved
    bool blind = false;  // a whole write of a quarantined block: its old copy is not read
    // Whether the retrieval selects the block on its path (else it selects
    // nothing on a random one, which looks the same to a server).
    bool reads() const { return where && !repeat_of && !own_copy && !blind; }
  };
  // What a finished access left, for a later item of the chunk on the same block.
  struct Done {
    bool mapped = false;        // it left the block in the tree
    std::uint64_t version = 0;  // under this version
    std::vector<std::uint8_t> stored;
  };

  std::span<const BatchItem> items;  // the first k are this chunk's accesses
  std::size_t q = 0;                 // root writes pending when it began
  std::uint64_t base = 0;            // the root slot its first access writes
  std::size_t k = 0;
  std::vector<Plan> plans;
  std::vector<ServerSet::Outgoing> requests;
  std::vector<LeafId> revealed;  // the path each retrieval revealed (0: a random one)
  std::vector<Outcome> outcomes;
  std::vector<Result<std::vector<wire::Message>>> replies;
  // Resends happened: a pipelined answer that does not authenticate may be
  // garbage (a retrieval resent after a later root write), not a lie.
  bool resent = false;
  // The state transaction: the carried root writes, then each access.
  Counters next;
  ClientStateStore::Batch batch;
  std::size_t carried = 0;  // pending root writes every server acknowledged
  std::vector<std::optional<Done>> done;
  std::vector<PendingRoot> roots;
  std::vector<Result<std::vector<std::uint8_t>>> results;
  Status chunk_error;    // why the chunk stopped early
  Status first_refusal;  // why an access failed, for a quarantine
  std::size_t finished = 0;
};

Status OramClient::RunChunk(std::span<const BatchItem> items,
                            std::vector<Result<std::vector<std::uint8_t>>>& out) {
  S3ORAM_RETURN_IF_ERROR(BeforeChunk());
  Chunk c;
  c.items = items;
  c.q = pending_roots_.size();
  c.base = session_->counters().nr + c.q;
  c.k = static_cast<std::size_t>(
      std::min<std::uint64_t>({items.size(), kMaxPipelined, params().evict_rate - c.base}));
  // Paced as the last of them would be alone: the accesses before it whose
  // root writes the servers acknowledged, or will with this chunk.
  evictor_->Pace(c.base + c.k - 1 - (c.q > 0 ? 1 : 0), c.base);
  S3ORAM_RETURN_IF_ERROR(PlanChunk(c));
  S3ORAM_RETURN_IF_ERROR(BuildRetrievals(c));
  SendRetrievals(c);
  for (std::size_t j = 0; j < c.k; ++j, ++c.finished) {
    if (FinishAccess(c, j) == AccessEnd::kStopChunk) break;
  }
  S3ORAM_RETURN_IF_ERROR(RecordChunk(c, out));
  if (!c.chunk_error.ok()) return c.chunk_error;
  EndRoundIfFull(items[c.finished == 0 ? 0 : c.finished - 1].id);
  return Status::Ok();
}

Status OramClient::BeforeChunk() {
  const OramParams& p = params();
  // A deferred root write in the root's last slot goes alone (an earlier
  // flush before the eviction failed), and an eviction left pending by an
  // earlier failure must finish first: the root has no free slot until then.
  if (!pending_roots_.empty() && pending_roots_.back().slot + 1 >= p.evict_rate) {
    S3ORAM_RETURN_IF_ERROR(FlushPendingRoots());
  }
  if (session_->counters().nr >= p.evict_rate) {
    TimeInto timer(stats_.timings.eviction_ns);
    S3ORAM_RETURN_IF_ERROR(evictor_->RunEviction());
  }
  // No root write of this round before every server copied the last round's
  // root aside for the eviction in flight.
  if (evictor_->in_flight() != nullptr && !evictor_->started()) {
    TimeInto timer(stats_.timings.eviction_ns);
    S3ORAM_RETURN_IF_ERROR(evictor_->EnsureStarted());
  }
  // Root slots from nr on may hold inconsistent sharings (an Open, a failed
  // root write). One deferred root write rewrites slot nr completely on
  // every server before the first retrieval; several are sent alone first
  // (the first retrieval would read the later slots); with none, slot nr is
  // repaired.
  if (root_slot_dirty_) {
    if (pending_roots_.empty()) {
      S3ORAM_RETURN_IF_ERROR(RepairRootSlot());
    } else if (pending_roots_.size() > 1) {
      S3ORAM_RETURN_IF_ERROR(FlushPendingRoots());
      if (root_slot_dirty_) S3ORAM_RETURN_IF_ERROR(RepairRootSlot());
    }
  }
  return Status::Ok();
}

Status OramClient::PlanChunk(Chunk& c) {
  for (bool planned = false; !planned;) {
    c.plans.assign(c.k, Chunk::Plan{});
    planned = true;
    for (std::size_t j = 0; j < c.k && planned; ++j) {
      S3ORAM_ASSIGN_OR_RETURN(planned, PlanAccess(c, j));
    }
  }
  return Status::Ok();
}

Result<bool> OramClient::PlanAccess(Chunk& c, std::size_t j) {
  const BlockId id = c.items[j].id;
  Chunk::Plan& pl = c.plans[j];
  for (std::size_t i = j; i-- > 0;) {
    if (c.items[i].id == id) {
      pl.repeat_of = i;
      return true;
    }
  }
  const bool quarantined = !quarantined_.empty() && quarantined_.count(id) != 0;
  // Its newest copy may be a pending root write: retrieval x carries
  // pending write x, and a server applies it before its retrieval and
  // handles a connection's requests in order, so retrievals from x on
  // find it in its root slot; earlier ones do not, and the client's own
  // copy serves them.
  std::optional<std::size_t> newest;
  for (std::size_t x = 0; x < c.q; ++x) {
    if (pending_roots_[x].id == id && pending_roots_[x].mapped) newest = x;
  }
  if (newest) {
    const PendingRoot& r = pending_roots_[*newest];
    if (*newest <= j) {
      pl.where = r.moved;
      pl.blind = quarantined;
    } else {
      pl.own_copy = r.elems;
      pl.own_version = r.moved.version;
    }
    return true;
  }
  const PositionEntry* at = pm_->Find(id);
  if (at) pl.where = *at;
  pl.blind = at && quarantined;
  const EvictionRecord* in_flight = evictor_->in_flight();
  if (!at || in_flight == nullptr) return true;
  // A block the eviction in flight moves is still where it was on the
  // servers (they commit the eviction at the end of this round); one it
  // takes out of a root slot this round may have overwritten is read
  // from the client's own copy, behind a retrieval that selects nothing.
  const auto bt = in_flight->before.find(id);
  if (bt == in_flight->before.end()) return true;
  pl.where = PositionEntry{bt->second, at->version};
  // Slots this round wrote, and those this chunk's retrievals may
  // rewrite first (the pending ones; slot nr after a repair).
  const std::uint64_t overwritten = session_->counters().nr + std::max<std::size_t>(c.q, 1);
  if (bt->second.level != 0 || bt->second.slot >= overwritten) return true;
  pl.own_copy = RootCopyOf(id, *pl.where);
  pl.own_version = at->version;
  if (pl.own_copy) return true;
  // No usable copy (lost in a power failure, or written by another
  // process): the block is only in the eviction's result. Commit it now (a
  // server sees this one commit early) and plan again.
  if (!early_commit_logged_) {
    spdlog::info(
        "block {} is only in eviction {}'s result (no copy in {}): the eviction commits early", id,
        in_flight->eviction, root_copies_ ? root_copies_->path() : std::string("the root copies"));
    early_commit_logged_ = true;
  }
  TimeInto timer(stats_.timings.eviction_ns);
  S3ORAM_RETURN_IF_ERROR(evictor_->FinishInFlight());
  return false;
}

Status OramClient::BuildRetrievals(Chunk& c) {
  // Retrieval j: fresh random select shares of its path (an all-zero
  // select over a random path where the block is not read from the
  // servers: that looks exactly like a real one), carrying pending root
  // write j afresh shared.
  const OramParams& p = params();
  const TreeGeometry geo = p.geometry();
  const std::size_t n = geo.path_slots();
  S3ORAM_ASSIGN_OR_RETURN(std::vector<wire::Header> headers, session_->NextMutationHeaders(c.k));
  c.requests.assign(c.k, ServerSet::Outgoing{});
  c.revealed.assign(c.k, 0);
  TimeInto timer(stats_.timings.client_compute_ns);
  std::vector<std::vector<Elem>> select_shares(p.parties), root_shares(p.parties);
  for (std::size_t j = 0; j < c.k; ++j) {
    Chunk::Plan& pl = c.plans[j];
    std::vector<Elem> select(n, 0);
    if (pl.reads()) {
      pl.leaf = pl.where->pos.leaf;
      select[std::size_t{pl.where->pos.level} * p.bucket_size + pl.where->pos.slot] = 1;
      c.revealed[j] = pl.leaf;
    } else {
      pl.leaf = geo.first_leaf() + random::Below(geo.num_leaves());
    }
    ShareVector(select, p.threshold, select_shares);
    const bool carries = j < c.q;
    if (carries) ShareVector(pending_roots_[j].elems, p.threshold, root_shares);
    ServerSet::Outgoing& o = c.requests[j];
    o.header = headers[j];
    o.expected_reply = wire::MessageType::kRetrieveReply;
    for (std::size_t i = 0; i < p.parties; ++i) {
      if (carries) {
        o.frames.push_back(
            wire::Encode(headers[j], wire::Body{wire::RetrieveWriteRootRequest{
                                         pending_roots_[j].slot, std::move(root_shares[i]), pl.leaf,
                                         std::move(select_shares[i])}}));
      } else {
        o.frames.push_back(wire::Encode(
            headers[j], wire::Body{wire::RetrieveRequest{pl.leaf, std::move(select_shares[i])}}));
      }
      select_shares[i] = {};
      root_shares[i] = {};
    }
  }
  return Status::Ok();
}

void OramClient::SendRetrievals(Chunk& c) {
  c.outcomes.assign(c.k, Outcome::kUnanswered);
  chunk_sent_ = true;
  const std::uint64_t resends_before = session_->servers().stats().resends;
  {
    TimeInto timer(stats_.timings.retrieve_wait_ns);
    std::vector<std::size_t> all(params().parties);
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    c.replies = session_->servers().ExchangeSequence(all, c.requests, session_->options().requests);
  }
  c.requests.clear();
  // A server that lost its connection and got requests again answers a
  // retrieval sent again after a later root write over a changed root: such
  // an answer is garbage, and a pipelined access that does not authenticate
  // after resends is tried again alone, not failed.
  c.resent = c.k > 1 && session_->servers().stats().resends != resends_before;

  // Every server holds the root writes the answered requests carried, up to
  // the first request that failed: they are recorded in the transaction that
  // records this chunk's accesses. From that request on, the slots the
  // pending writes go to may be inconsistent: they are rewritten before the
  // next retrieval.
  c.next = session_->counters();
  c.done.assign(c.k, std::nullopt);
  const std::size_t carrying = std::min(c.q, c.k);
  while (c.carried < carrying && c.replies[c.carried].ok()) {
    if (c.carried == 0) FaultPoint("client.access.after_write_root");
    RecordRootWritten(pending_roots_[c.carried], c.batch, c.next);
    ++c.carried;
  }
  if (c.carried < carrying) root_slot_dirty_ = true;
  if (c.carried > 0) root_slot_dirty_ = root_slot_dirty_ && c.carried < carrying;
}

// One access of a chunk between its answer and its root write.
struct OramClient::AccessWork {
  std::vector<std::uint8_t> previous;  // the block's bytes before the access
  std::vector<Elem> elems;             // the recovered slot, then the new one
  bool held = false;                   // the block had a copy before this access
  std::uint64_t old_version = 0;
  bool authentic = true;
  bool packed = true;  // the recovered data part was a valid packing
};

OramClient::AccessEnd OramClient::FinishAccess(Chunk& c, std::size_t j) {
  if (!c.replies[j].ok()) {
    c.chunk_error = c.replies[j].status();
    if (IsAnsweredFailure(c.chunk_error)) c.outcomes[j] = Outcome::kRefused;
    return AccessEnd::kStopChunk;
  }
  TimeInto compute(stats_.timings.client_compute_ns);
  AccessWork w;
  w.previous.assign(params().block_bytes, 0);
  const AccessEnd recovered = RecoverAccess(c, j, w);
  if (recovered != AccessEnd::kNext) return recovered;
  const BatchItem& item = c.items[j];
  // A write of the whole block does not need the old content: one that
  // does not authenticate (a block destroyed by a fault or a lying server)
  // is replaced by a fresh version all the same. The retrieval ran as for
  // any access, so the servers see the same access either way.
  const bool whole_write = item.op == AccessOp::kWrite && !item.modify;
  if (!w.authentic && c.resent) return AccessEnd::kStopChunk;  // tried again alone next
  if (!w.authentic && whole_write) {
    spdlog::warn(
        "block {} (version {}) did not authenticate; it is overwritten whole with version {}",
        item.id, w.old_version, w.old_version + 1);
    std::fill(w.previous.begin(), w.previous.end(), 0);
  } else if (!w.authentic) {
    // Nothing of this access is written or logged: the block stays where
    // it is, and the next access to it retries the same path.
    Status bad = Status::Integrity(
        "block " + std::to_string(item.id) + " (version " + std::to_string(w.old_version) +
        ") failed authentication" + (w.packed ? "" : " (not even a valid packing)") +
        ": one of the servers " + session_->ServerSetName() +
        " returned tampered, swapped or stale data, or the client state does not match them");
    spdlog::error("{}", bad.message());
    c.results.emplace_back(bad);
    c.outcomes[j] = Outcome::kRefused;
    if (c.first_refusal.ok()) c.first_refusal = bad;
    return AccessEnd::kNext;
  }
  return ResealAccess(c, j, w);
}

OramClient::AccessEnd OramClient::RecoverAccess(Chunk& c, std::size_t j, AccessWork& w) {
  const OramParams& p = params();
  const std::size_t m = p.elems_per_slot();
  const BlockId id = c.items[j].id;
  Chunk::Plan& pl = c.plans[j];
  if (pl.repeat_of) {
    // What the earlier item left; it failed: this one goes in the next
    // chunk, on its own retrieval.
    if (!c.done[*pl.repeat_of]) return AccessEnd::kStopChunk;
    const Chunk::Done& d = *c.done[*pl.repeat_of];
    w.held = d.mapped;
    w.old_version = d.mapped ? d.version : 0;
    if (d.mapped) w.previous = d.stored;
    w.elems.assign(m, 0);
    return AccessEnd::kNext;
  }
  if (pl.own_copy) {
    w.elems = std::move(*pl.own_copy);
    w.held = true;
    w.old_version = pl.own_version;
  } else if (pl.blind) {
    // Nothing to read: the new version replaces the old, which stays
    // behind as an unmapped slot (the next eviction through it drops it).
    w.elems.assign(m, 0);
    w.old_version = pl.where->version;
  } else {
    std::vector<const Elem*> answers;
    for (std::size_t i = 0; i < c.replies[j].value().size(); ++i) {
      const auto& ans = std::get<wire::RetrieveReply>(c.replies[j].value()[i].body).answer;
      if (ans.size() != m) {
        c.chunk_error = Status::Protocol("server " + std::to_string(i) + " answered " +
                                         std::to_string(ans.size()) + " elements, expected " +
                                         std::to_string(m));
        c.outcomes[j] = Outcome::kRefused;
        return AccessEnd::kStopChunk;
      }
      answers.push_back(ans.data());
    }
    w.elems.resize(m);
    shamir::Recover(answers, lambda_, m, w.elems.data());
    w.held = pl.where.has_value();
    w.old_version = w.held ? pl.where->version : 0;
  }
  if (w.held)
    w.authentic = session_->codec().Open(id, w.old_version, w.elems, w.previous, &w.packed);
  return AccessEnd::kNext;
}

OramClient::AccessEnd OramClient::ResealAccess(Chunk& c, std::size_t j, AccessWork& w) {
  const OramParams& p = params();
  const TreeGeometry geo = p.geometry();
  const BatchItem& item = c.items[j];
  const Chunk::Plan& pl = c.plans[j];
  // What goes to the root: the new data (write), the old data changed by
  // `modify` (update) or the old (read), sealed under the next version with
  // a fresh nonce, so every rewrite looks new. A read of an unmapped block
  // writes an all-zero slot nobody will read.
  std::vector<std::uint8_t> updated;
  std::span<const std::uint8_t> data = item.data;
  if (item.modify) {
    updated = w.previous;
    (*item.modify)(updated);
    data = updated;
  }
  const bool mapped = w.held || item.op == AccessOp::kWrite;
  w.elems.assign(p.elems_per_slot(), 0);
  if (mapped) {
    session_->codec().Seal(item.id, w.old_version + 1,
                           item.op == AccessOp::kWrite ? data : w.previous, w.elems);
  }

  // This access's root write, deferred to a later request: the slot after
  // every pending one. Logged with this chunk's record, so once AccessMany
  // returns a crash cannot lose it (Open sends it).
  PendingRoot root;
  root.slot = static_cast<std::uint32_t>(c.base + c.roots.size());
  root.key = kPendingRootKey + root.slot;
  root.id = item.id;
  root.mapped = mapped;
  root.moved.pos = Position{geo.first_leaf() + random::Below(geo.num_leaves()), 0, root.slot};
  root.moved.version = w.old_version + 1;
  root.elems = std::move(w.elems);
  c.batch.AddPending(PendingOp{root.key, kRootKind, EncodeRootPayload(root)});
  // The client's own copy of the root write, before the access is
  // recorded: the next round may need it while this round's eviction is
  // in flight.
  if (root_copies_) {
    if (Status st = root_copies_->Put(RootCopies::Index(current_round(), root.slot, p.evict_rate),
                                      root.elems);
        !st.ok()) {
      c.chunk_error = st;
      return AccessEnd::kStopChunk;
    }
  }
  // Ids, versions and positions only (this log stays on the client): never bytes.
  spdlog::debug("access {} block {}: version {} -> {}, root slot {}, retrieved leaf {}",
                item.modify ? "update" : (item.op == AccessOp::kWrite ? "write" : "read"), item.id,
                w.old_version, mapped ? root.moved.version : 0, root.slot,
                pl.where && !pl.own_copy && !pl.repeat_of ? pl.where->pos.leaf : 0);
  Chunk::Done d;
  d.mapped = mapped;
  d.version = root.moved.version;
  d.stored = item.modify ? updated
                         : (item.op == AccessOp::kWrite
                                ? std::vector<std::uint8_t>(item.data.begin(), item.data.end())
                                : w.previous);
  c.results.emplace_back(item.modify || item.op == AccessOp::kRead ? d.stored
                                                                   : std::move(w.previous));
  c.done[j] = std::move(d);
  c.roots.push_back(std::move(root));
  return AccessEnd::kNext;
}

Status OramClient::RecordChunk(Chunk& c, std::vector<Result<std::vector<std::uint8_t>>>& out) {
  // One transaction records the root writes the servers acknowledged and
  // this chunk's accesses (their root writes pending). Their results reach
  // the caller only once it committed: an access that returned is one a
  // crash cannot lose.
  const std::span<const BatchItem> accesses = c.items.first(c.k);
  c.batch.SetCounters(c.next);
  if (c.carried > 0 || !c.roots.empty()) {
    TimeInto timer(stats_.timings.state_commit_ns);
    if (Status st = session_->store().Commit(c.batch, /*durable=*/true); !st.ok()) {
      // None of them happened: every path that went out is exposed.
      NoteExposures(accesses, c.revealed, std::vector<Outcome>(c.k, Outcome::kUnanswered), st);
      return st;
    }
  }
  for (std::size_t j = 0; j < c.k; ++j) {
    if (c.done[j]) c.outcomes[j] = Outcome::kCompleted;
  }
  NoteExposures(accesses, c.revealed, c.outcomes,
                c.chunk_error.ok() ? c.first_refusal : c.chunk_error);
  // The state on disk has all of it now; so must the memory, even if a
  // position does not fit the map (then this client reports the error).
  Status applied = Status::Ok();
  for (std::size_t x = 0; x < c.carried; ++x) {
    if (Status st = RootWrittenCommitted(c.next); !st.ok() && applied.ok()) applied = st;
  }
  session_->counters() = c.next;
  for (std::size_t j = 0; j < c.finished; ++j) {
    // Taken out of the eviction in flight: its copy there is stale, its slot free.
    if (c.done[j]) evictor_->TakenOut(c.items[j].id);
  }
  for (auto& r : c.roots) pending_roots_.push_back(std::move(r));
  S3ORAM_RETURN_IF_ERROR(applied);
  for (auto& r : c.results) out.push_back(std::move(r));
  return Status::Ok();
}

void OramClient::EndRoundIfFull(BlockId last_access) {
  if (pending_roots_.empty() || pending_roots_.back().slot + 1 < params().evict_rate) return;
  // The root's last slot: the eviction reads the whole root, so the writes
  // go now, then the eviction. The accesses themselves are recorded: their
  // results are reported. A failed flush or eviction stays due and is
  // retried (or reported) at the start of the next access.
  Status st = FlushPendingRoots();
  if (st.ok()) {
    TimeInto timer(stats_.timings.eviction_ns);
    st = evictor_->RunEviction();
  }
  if (!st.ok()) {
    session_->NoteProblem(st);
    spdlog::warn("eviction {} failed after access to block {}: {}", session_->counters().ne,
                 last_access, st.ToString());
  }
}

Status OramClient::CleanUpExposed() {
  spdlog::info("reading back {} block(s) whose access failed, along the path{} that failure exposed",
               exposed_.size(), exposed_.size() == 1 ? "" : "s");
  cleaning_ = true;
  Status st = Status::Ok();
  // Every exposure ends here: read back, or quarantined after
  // kCleanupAttempts failed read-backs in a row, with nothing in between,
  // so what the servers see follows the failures alone. Only a silence (or
  // an error before anything went out) leaves exposures for the next chunk,
  // whose access then fails the same way.
  for (std::uint32_t round = 0; round < kCleanupAttempts && !exposed_.empty() && st.ok();
       ++round) {
    std::vector<BatchItem> items;
    for (const Exposed& e : exposed_) {
      items.push_back(BatchItem{AccessOp::kRead, e.id, {}, nullptr});
    }
    std::vector<Result<std::vector<std::uint8_t>>> out;
    std::size_t next = 0;
    std::size_t limit = kMaxPipelined;
    while (next < items.size() && st.ok()) {
      const std::size_t before = out.size();
      const std::size_t given = std::min(limit, items.size() - next);
      chunk_sent_ = false;
      st = RunChunk(std::span<const BatchItem>(items).subspan(next, given), out);
      const std::size_t finished = out.size() - before;
      next += finished;
      // As in AccessMany: after a chunk cut short, one access at a time,
      // which always finishes or fails.
      limit = finished < given ? 1 : kMaxPipelined;
      if (!st.ok() && chunk_sent_ && IsAnsweredFailure(st)) {
        // That read-back failed as its access did (NoteExposures counted
        // it); the rest go on.
        session_->NoteProblem(st);
        ++next;
        st = Status::Ok();
      }
    }
    for (const auto& r : out) {
      if (!r.ok()) session_->NoteProblem(r.status());
    }
  }
  cleaning_ = false;
  return st;
}

bool OramClient::IsAnsweredFailure(const Status& st) {
  switch (st.code()) {
    case Status::Code::kOk:
    case Status::Code::kUnavailable:  // a silence: nothing was learnt
    case Status::Code::kLeaseHeld:    // fenced: nothing more will be sent
    case Status::Code::kIoError:      // this machine's own failure (a commit)
      return false;
    default:
      return true;
  }
}

void OramClient::NoteExposures(std::span<const BatchItem> items,
                               const std::vector<LeafId>& revealed,
                               const std::vector<Outcome>& outcomes, const Status& why) {
  for (std::size_t j = 0; j < items.size() && j < outcomes.size(); ++j) {
    const BlockId id = items[j].id;
    auto it = std::find_if(exposed_.begin(), exposed_.end(),
                           [id](const Exposed& e) { return e.id == id; });
    if (outcomes[j] == Outcome::kCompleted) {
      if (it != exposed_.end()) exposed_.erase(it);
      if (!quarantined_.empty()) quarantined_.erase(id);
      continue;
    }
    if (revealed[j] == 0 || (!quarantined_.empty() && quarantined_.count(id) != 0)) continue;
    const Status reason = why.ok() ? Status::Unavailable("the access did not complete") : why;
    if (it == exposed_.end()) {
      exposed_.push_back(Exposed{id, revealed[j], 0, reason});
      continue;
    }
    if (!cleaning_ || outcomes[j] != Outcome::kRefused) continue;
    it->why = reason;
    if (++it->attempts >= kCleanupAttempts) {
      spdlog::warn(
          "block {} is quarantined: its path failed {} retrievals in a row; it is not "
          "retrieved again while this client runs",
          id, it->attempts + 1);
      quarantined_.insert_or_assign(id, reason);
      exposed_.erase(it);
    }
  }
}

}  // namespace s3oram

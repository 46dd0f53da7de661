#include "oramcore/protocol/root_write_queue.h"

#include <algorithm>
#include <string>
#include <utility>

#include "oramcore/base/fault_point.h"
#include "oramcore/base/time_into.h"
#include "oramcore/protocol/fresh_shares.h"

namespace s3oram {

using field::Elem;

std::optional<std::size_t> RootWriteQueue::NewestOf(BlockId id) const {
  for (std::size_t x = entries_.size(); x-- > 0;) {
    if (entries_[x].id == id && entries_[x].mapped) return x;
  }
  return std::nullopt;
}

std::vector<std::uint8_t> RootWriteQueue::Encode(const Entry& e) {
  std::vector<std::uint8_t> out;
  out.reserve(PendingRootPayloadBytes(e.elems.size()));
  auto put = [&out](std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  };
  put(e.slot, 4);
  put(e.id, 8);
  put(e.mapped ? 1 : 0, 1);
  put(e.moved.pos.leaf, 8);
  put(e.moved.version, 8);
  put(e.elems.size(), 4);
  for (Elem x : e.elems) put(x, 4);
  return out;
}

Result<RootWriteQueue::Entry> RootWriteQueue::Decode(const std::vector<std::uint8_t>& p,
                                                     std::uint64_t slot) const {
  const OramParams& params = session_.params();
  const std::size_t m = params.elems_per_slot();
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
  Entry e;
  e.slot = static_cast<std::uint32_t>(get(4));
  e.id = get(8);
  const std::uint64_t mapped = get(1);
  e.moved.pos.leaf = get(8);
  e.moved.version = get(8);
  const std::uint64_t n = get(4);
  const TreeGeometry geo = params.geometry();
  if (mapped > 1 || n != m || e.slot != slot || e.slot >= params.evict_rate ||
      e.id >= params.capacity_blocks || (mapped == 1 && !geo.is_leaf(e.moved.pos.leaf))) {
    return Status::Corruption("pending root write record does not match this filesystem (slot " +
                              std::to_string(e.slot) + ", expected root slot " +
                              std::to_string(slot) + ")");
  }
  e.mapped = mapped == 1;
  e.moved.pos.level = 0;
  e.moved.pos.slot = e.slot;
  e.elems.resize(m);
  for (Elem& x : e.elems) {
    x = static_cast<Elem>(get(4));
    if (x >= field::kPrime)
      return Status::Corruption("pending root write record holds a bad element");
  }
  return e;
}

Status RootWriteQueue::ResendLogged() {
  // Root writes accesses logged but had not sent (or not seen acknowledged
  // by every server) when this state was last used, for slots nr, nr + 1,
  // ...: send them now, in order.
  S3ORAM_ASSIGN_OR_RETURN(auto pending, session_.store().LoadPending());
  std::vector<PendingOp> roots;
  for (auto& op : pending) {
    if (op.kind != kPendingRootKind) continue;
    if (op.seq < kPendingRootKey || op.seq - kPendingRootKey >= session_.params().evict_rate) {
      return Status::Corruption("pending root write under an unexpected key " +
                                std::to_string(op.seq));
    }
    roots.push_back(std::move(op));
  }
  // Each under the key of its slot (kPendingRootKey + slot), so key order
  // is slot order; Decode checks that they follow nr in turn.
  std::sort(roots.begin(), roots.end(),
            [](const PendingOp& a, const PendingOp& b) { return a.seq < b.seq; });
  for (const auto& op : roots) {
    S3ORAM_ASSIGN_OR_RETURN(Entry e, Decode(op.payload, session_.counters().nr + entries_.size()));
    e.key = op.seq;
    entries_.push_back(std::move(e));
  }
  return Flush();
}

Status RootWriteQueue::PrepareRetrievals() {
  if (!dirty_) return Status::Ok();
  // One queued write rewrites slot nr completely on every server before
  // the retrieval that carries it reads; several are sent alone first (the
  // first retrieval would read the later slots); with none, slot nr is
  // repaired.
  if (entries_.empty()) return Repair();
  if (entries_.size() > 1) {
    S3ORAM_RETURN_IF_ERROR(Flush());
    if (dirty_) return Repair();
  }
  return Status::Ok();
}

Status RootWriteQueue::Repair() {
  std::vector<Elem> zeros(session_.params().elems_per_slot(), 0);
  S3ORAM_RETURN_IF_ERROR(
      WriteRoot(static_cast<std::uint32_t>(session_.counters().nr), zeros)
          .WithContext("rewriting root slot " + std::to_string(session_.counters().nr)));
  dirty_ = false;
  return Status::Ok();
}

Status RootWriteQueue::WriteRoot(std::uint32_t slot, std::span<const Elem> elems) {
  // At most one retry per server that can be left out.
  for (;;) {
    const Status st = WriteRootOnce(slot, elems);
    if (st.ok()) return st;
    S3ORAM_ASSIGN_OR_RETURN(const bool excluded, ExcludedAfter(st, slot));
    if (!excluded) return st;
  }
}

Result<bool> RootWriteQueue::ExcludedAfter(const Status& failure, std::uint32_t slot) {
  if (failure.ok() || !IsSilence(failure)) return false;
  return session_.ExcludeDown("it did not acknowledge the root write of slot " +
                              std::to_string(slot));
}

Status RootWriteQueue::WriteRootOnce(std::uint32_t slot, std::span<const Elem> elems) {
  return session_
      .ExchangeShared(
          elems,
          [slot](std::vector<Elem>&& share, const wire::ShareSeed& seed) {
            return wire::Body{wire::WriteRootRequest{slot, std::move(share), seed}};
          },
          wire::MessageType::kWriteRootReply, session_.options().requests,
          stats_.timings.client_compute_ns, stats_.timings.root_write_wait_ns)
      .status();
}

void RootWriteQueue::RecordWritten(const Entry& e, ClientStateStore::Batch& batch,
                                   Counters& next) const {
  next.nr = e.slot + 1;
  batch.SetCounters(next);
  if (e.mapped) batch.PutPosition(e.id, e.moved);
  batch.RemovePending(e.key);
}

Status RootWriteQueue::OldestCommitted(const Counters& next) {
  Entry e = std::move(entries_.front());
  entries_.pop_front();
  session_.counters() = next;
  ++stats_.accesses;
  if (e.mapped) return pm_.Place(e.id, e.moved.pos, e.moved.version);
  return Status::Ok();
}

void RootWriteQueue::RecordCarried(std::size_t carried, std::size_t carrying,
                                   const std::vector<LagNote>& lags, ClientStateStore::Batch& batch,
                                   Counters& next) {
  if (carried > 0) FaultPoint("client.access.after_write_root");
  staged_.clear();
  for (std::size_t x = 0; x < carried; ++x) {
    RecordWritten(entries_[x], batch, next);
    if (x < lags.size() && (!lags[x].servers.empty() || !lags[x].failed.empty())) {
      batch.AddPending(
          PendingOp{kPendingLagKey + entries_[x].slot, kPendingLagKind, Encode(entries_[x])});
      staged_.push_back(LaggingWrite{lags[x].seq, lags[x].servers, lags[x].failed, entries_[x]});
    }
  }
  // From the first write that did not reach every server on, the slots the
  // queued writes go to may be inconsistent: rewritten before the next
  // retrieval.
  if (carried < carrying) {
    dirty_ = true;
  } else if (carried > 0) {
    dirty_ = false;
  }
}

Status RootWriteQueue::CarriedCommitted(std::size_t carried, const Counters& next) {
  // The state on disk has all of them: so must the memory, even if a
  // position does not fit the map (the caller then reports the error).
  Status applied = Status::Ok();
  for (LaggingWrite& w : staged_) lagging_.push_back(std::move(w));
  staged_.clear();
  for (std::size_t x = 0; x < carried; ++x) {
    if (Status st = OldestCommitted(next); !st.ok() && applied.ok()) applied = st;
  }
  return applied;
}

Status RootWriteQueue::FlushOldest() {
  if (entries_.empty()) return Status::Ok();
  // A complete write of slot nr on every server also repairs it.
  if (Status st = WriteRoot(entries_.front().slot, entries_.front().elems); !st.ok()) {
    dirty_ = true;
    return st;
  }
  // Slots after it that a failed pipelined exchange may have touched stay
  // to be rewritten by their own flush.
  if (entries_.size() == 1) dirty_ = false;
  FaultPoint("client.access.after_write_root");
  ClientStateStore::Batch batch;
  Counters next = session_.counters();
  RecordWritten(entries_.front(), batch, next);
  {
    TimeInto timer(stats_.timings.state_commit_ns);
    S3ORAM_RETURN_IF_ERROR(session_.store().Commit(batch, /*durable=*/true));
  }
  return OldestCommitted(next);
}

Status RootWriteQueue::Flush() {
  if (entries_.size() <= 1) return FlushOldest();
  // Several (pipelined accesses): their WRITE_ROOTs go back to back, in slot
  // order, and the ones every server acknowledged, up to the first that
  // failed, are recorded in one transaction.
  const OramParams& p = session_.params();
  const std::size_t k = entries_.size();
  S3ORAM_ASSIGN_OR_RETURN(std::vector<wire::Header> headers, session_.NextMutationHeaders(k));
  std::vector<ServerSet::Outgoing> requests(k);
  {
    TimeInto timer(stats_.timings.client_compute_ns);
    std::vector<std::vector<Elem>> shares(p.parties);
    wire::ShareSeed seed;
    const std::size_t seeded_party = session_.seeded_party();
    for (std::size_t j = 0; j < k; ++j) {
      ShareVectorSeeded(entries_[j].elems, p.threshold, shares, seed, seeded_party);
      requests[j].header = headers[j];
      requests[j].expected_reply = wire::MessageType::kWriteRootReply;
      for (std::size_t i : session_.participants()) {
        requests[j].frames.push_back(wire::Encode(
            headers[j],
            wire::Body{wire::WriteRootRequest{entries_[j].slot, std::move(shares[i]),
                                              i == seeded_party ? seed : wire::ShareSeed{}}}));
        shares[i] = {};
      }
    }
  }
  std::vector<Result<std::vector<wire::Message>>> replies;
  {
    TimeInto timer(stats_.timings.root_write_wait_ns);
    replies = session_.servers().ExchangeSequence(session_.participants(), requests,
                                                  session_.options().requests);
  }
  std::size_t written = 0;
  while (written < k && replies[written].ok()) ++written;
  dirty_ = written < k;
  if (written > 0) {
    FaultPoint("client.access.after_write_root");
    ClientStateStore::Batch batch;
    Counters next = session_.counters();
    for (std::size_t j = 0; j < written; ++j) RecordWritten(entries_[j], batch, next);
    {
      TimeInto timer(stats_.timings.state_commit_ns);
      S3ORAM_RETURN_IF_ERROR(session_.store().Commit(batch, /*durable=*/true));
    }
    for (std::size_t j = 0; j < written; ++j) S3ORAM_RETURN_IF_ERROR(OldestCommitted(next));
  }
  if (written < k) {
    // A server found down is left out if the others can go on, and the
    // writes not recorded go again to them, afresh (a slot the failed
    // request reached on some servers is written whole again).
    S3ORAM_ASSIGN_OR_RETURN(
        const bool excluded,
        ExcludedAfter(replies[written].status(), entries_.empty() ? 0 : entries_.front().slot));
    if (excluded) return Flush();
    return replies[written].status();
  }
  return Status::Ok();
}

}  // namespace s3oram

// AccessPath's loop over chunks, and the exposures a failed access leaves
// (access_path.h); the chunk's steps are in access_chunk.cpp.
#include "oramcore/protocol/access_path.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <string>

namespace s3oram {

std::vector<Result<std::vector<std::uint8_t>>> AccessPath::AccessMany(
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
    if (session_.fenced()) {
      return Status::LeaseHeld(
          "this client was fenced off: another client took the filesystem's lease over, so this "
          "one can no longer read or change anything");
    }
    if (session_.read_only()) return Status::FailedPrecondition("client opened read-only");
    if (!session_.lease_held()) return Status::FailedPrecondition("client closed");
    return std::nullopt;
  };
  if (auto st = unusable()) return fail_rest(*st);
  std::size_t next = 0;
  // A chunk that finished nothing (an access to try again alone) is
  // followed by one of a single access, which always finishes or fails.
  std::size_t limit = kMaxPipelined;
  while (next < items.size()) {
    // Paths exposed by a failed access are read back first, whatever comes
    // next (see exposed_).
    if (!exposed_.empty()) {
      if (Status st = CleanUpExposed(); !st.ok()) return fail_rest(session_.NoteFencing(st));
      if (auto st = unusable()) return fail_rest(*st);
      // Every exposure ends in a cleanup that returns OK (read back or
      // quarantined); should one not, nothing else may go before it.
      if (!exposed_.empty()) {
        return fail_rest(
            Status::Unavailable("a block's read-back after a failed access did not "
                                "finish; try again"));
      }
    }
    // An item refused before any access fails alone; a chunk stops before it.
    const BatchItem& it = items[next];
    if (Status refused = Refusal(it); !refused.ok()) {
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
      if (it.op == AccessOp::kWrite && session_.writes_stopped()) {  // stopped in between
        out.emplace_back(*session_.writes_stopped());
        ++next;
        continue;
      }
    }
    std::size_t valid = next + 1;
    while (valid < items.size() && valid - next < most) {
      if (!Refusal(items[valid]).ok()) break;
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
      st = session_.NoteFencing(st);
      return fail_rest(st);
    }
  }
  for (auto& r : out) {
    if (!r.ok()) r = session_.NoteFencing(r.status());
  }
  return out;
}

Status AccessPath::Refusal(const BatchItem& it) const {
  const OramParams& p = params();
  if (it.id >= p.capacity_blocks) {
    return Status::InvalidArgument("block " + std::to_string(it.id) +
                                   " is beyond the capacity of " +
                                   std::to_string(p.capacity_blocks) + " blocks");
  }
  if (it.op == AccessOp::kWrite && !it.modify && it.data.size() != p.block_bytes) {
    return Status::InvalidArgument("a write carries exactly " + std::to_string(p.block_bytes) +
                                   " bytes, got " + std::to_string(it.data.size()));
  }
  if (it.op == AccessOp::kWrite && session_.writes_stopped()) return *session_.writes_stopped();
  if (const Status* why = Quarantined(it)) {
    // The code of the failure (integrity, damaged storage ...), so that
    // callers treat it as they treated the failure itself.
    return why->WithContext(
        "block " + std::to_string(it.id) + " is quarantined: its path failed " +
        std::to_string(kCleanupAttempts + 1) +
        " retrievals in a row, and retrieving it again would tell the servers which access "
        "retries it; it stays unreadable until the filesystem is opened again, and writing "
        "the block whole replaces it. Last failure");
  }
  return Status::Ok();
}

const Status* AccessPath::Quarantined(const BatchItem& b) const {
  if (quarantined_.empty() || (b.op == AccessOp::kWrite && !b.modify)) return nullptr;
  const auto q = quarantined_.find(b.id);
  return q == quarantined_.end() ? nullptr : &q->second;
}

Status AccessPath::CleanUpExposed() {
  spdlog::info(
      "reading back {} block(s) whose access failed, along the path{} that failure exposed",
      exposed_.size(), exposed_.size() == 1 ? "" : "s");
  cleaning_ = true;
  Status st = Status::Ok();
  // Every exposure ends here: read back, or quarantined after
  // kCleanupAttempts failed read-backs in a row, with nothing in between,
  // so what the servers see follows the failures alone. Only a silence (or
  // an error before anything went out) leaves exposures for the next chunk,
  // whose access then fails the same way.
  for (std::uint32_t round = 0; round < kCleanupAttempts && !exposed_.empty() && st.ok(); ++round) {
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
        session_.NoteProblem(st);
        ++next;
        st = Status::Ok();
      }
    }
    for (const auto& r : out) {
      if (!r.ok()) session_.NoteProblem(r.status());
    }
  }
  cleaning_ = false;
  return st;
}

bool AccessPath::IsAnsweredFailure(const Status& st) {
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

void AccessPath::NoteExposures(std::span<const BatchItem> items,
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

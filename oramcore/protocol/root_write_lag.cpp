// RootWriteQueue's writes a server lags on (root_write_queue.h,
// "Writes a server lags on").
#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <utility>
#include <variant>

#include "oramcore/protocol/root_write_queue.h"

namespace s3oram {

namespace {

// A lagging request's end acknowledges it if it is a reply of the expected
// type, not an error.
bool Acknowledges(const Result<wire::Message>& end) {
  return end.ok() && !std::holds_alternative<wire::ErrorReply>(end.value().body);
}

}  // namespace

void RootWriteQueue::LagEnded(std::size_t server, std::uint64_t seq, bool acknowledged) {
  // Still staged (between RecordCarried and the commit) or recorded.
  for (auto* writes : {&lagging_, &staged_}) {
    for (LaggingWrite& w : *writes) {
      if (w.seq != seq) continue;
      std::erase(w.owing, server);
      if (!acknowledged) w.failed_on.push_back(server);
      return;
    }
  }
}

Status RootWriteQueue::SettleLagging(bool wait) {
  ServerSet& servers = session_.servers();
  // A server left out for what it answered owes nothing more.
  S3ORAM_RETURN_IF_ERROR(session_.ExcludeSuspects().status());
  for (const ServerSet::Lagged& end : servers.TakeLagged()) {
    LagEnded(end.server, end.seq, Acknowledges(end.reply));
    if (late_reply_) late_reply_(end);
  }
  if (wait) {
    // Every lagging write's end, from each server that owes it (bounded:
    // each ends by its deadline or its server found down). One the set no
    // longer knows cannot be vouched for: it is written again.
    for (LaggingWrite& w : lagging_) {
      std::erase_if(w.owing, [&](std::size_t i) { return session_.excluded(i); });
      const std::vector<std::size_t> owing = w.owing;
      for (std::size_t i : owing) {
        auto end = servers.AwaitLagged(i, w.seq);
        if (end.status().code() == Status::Code::kNotFound) {
          std::erase(w.owing, i);
          w.failed_on.push_back(i);
          continue;
        }
        LagEnded(i, w.seq, Acknowledges(end));
        if (late_reply_) {
          late_reply_(ServerSet::Lagged{i, w.seq, wire::MessageType::kError, std::move(end)});
        }
      }
    }
    // The ends the waits passed on the way (the same servers' earlier
    // requests).
    for (const ServerSet::Lagged& end : servers.TakeLagged()) {
      LagEnded(end.server, end.seq, Acknowledges(end.reply));
      if (late_reply_) late_reply_(end);
    }
  }
  ClientStateStore::Batch settled;
  bool any = false;
  for (auto it = lagging_.begin(); it != lagging_.end();) {
    // An excluded server's root is not read until it is caught up or
    // rebuilt: what it owes or failed no longer matters.
    std::erase_if(it->failed_on, [&](std::size_t i) { return session_.excluded(i); });
    std::erase_if(it->owing, [&](std::size_t i) { return session_.excluded(i); });
    // A server found down that failed a write is left out if the others
    // can go on without it (ClientSession::ExcludeDown): they hold the
    // write, and the excluded server's root is not read until a rebuild.
    if (!it->failed_on.empty()) {
      S3ORAM_RETURN_IF_ERROR(session_
                                 .ExcludeDown("it failed the root write of slot " +
                                              std::to_string(it->entry.slot) +
                                              " that the others acknowledged")
                                 .status());
      std::erase_if(it->failed_on, [&](std::size_t i) { return session_.excluded(i); });
      std::erase_if(it->owing, [&](std::size_t i) { return session_.excluded(i); });
    }
    if (!it->failed_on.empty()) {
      // The lagging server may not hold it: a fresh sharing of the same
      // sealed block on every server makes the slot consistent again.
      spdlog::warn(
          "a server failed the root write of slot {} after the others acknowledged it: "
          "the slot is written again on every server",
          it->entry.slot);
      S3ORAM_RETURN_IF_ERROR(WriteRoot(it->entry.slot, it->entry.elems)
                                 .WithContext("rewriting root slot " +
                                              std::to_string(it->entry.slot) +
                                              ", which a lagging server failed"));
      it->failed_on.clear();
      it->owing.clear();
    }
    if (!it->owing.empty()) {
      ++it;
      continue;
    }
    settled.RemovePending(kPendingLagKey + it->entry.slot);
    any = true;
    it = lagging_.erase(it);
  }
  // Not durable: a record a crash keeps only costs Open one rewrite of the
  // same block (RepairLoggedLagging), and an eviction's intent, which is
  // durable, drops them all.
  if (any) S3ORAM_RETURN_IF_ERROR(session_.store().Commit(settled, /*durable=*/false));
  return Status::Ok();
}

Status RootWriteQueue::RepairLoggedLagging() {
  S3ORAM_ASSIGN_OR_RETURN(auto pending, session_.store().LoadPending());
  ClientStateStore::Batch repaired;
  bool any = false;
  for (const PendingOp& op : pending) {
    if (op.kind != kPendingLagKind) continue;
    if (op.seq < kPendingLagKey || op.seq - kPendingLagKey >= session_.params().evict_rate) {
      return Status::Corruption("lagging root write under an unexpected key " +
                                std::to_string(op.seq));
    }
    S3ORAM_ASSIGN_OR_RETURN(Entry e, Decode(op.payload, op.seq - kPendingLagKey));
    S3ORAM_RETURN_IF_ERROR(WriteRoot(e.slot, e.elems)
                               .WithContext("rewriting root slot " + std::to_string(e.slot) +
                                            ", which a server lagged on when this state was "
                                            "last used"));
    repaired.RemovePending(op.seq);
    any = true;
  }
  if (any) S3ORAM_RETURN_IF_ERROR(session_.store().Commit(repaired, /*durable=*/true));
  return Status::Ok();
}

}  // namespace s3oram

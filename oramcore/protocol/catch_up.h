// Catching up an excluded server from inside an open client (a mount's
// keep-alive beat: OramClient::StartCatchUp and the steps after it), in
// steps, so that the accesses go on between them. Implemented in
// rebuild.cpp, whose data path it shares with `s3oram rebuild`'s catch-up
// (rebuild.h).
//
// The copy (CopyNext, called again and again) sends the server the buckets
// it misses as the participants hold them at that moment; an eviction
// committed between two steps makes the buckets it rewrote stale again,
// which later steps (or the last pass) send once more. The last pass
// (Finish) runs once the caller has settled the eviction and the root
// writes: it moves the server's goal to the participants' counters (a
// REBUILD_BEGIN again), sends the root and whatever is still stale, then
// REBUILD_FINISH. Each step is one range; the caller holds the client's
// lock for each call and may release it between them.
//
// Guarantees: the server is made live (FINISH) only at counters every
// participant has applied, after every bucket that changed since the server
// last received it was sent again at those counters; each range is read
// while every participant has applied the same evictions (checked by
// STATUS before it), so the masked terms combine into one sharing. What
// each party sees is what a rebuild's catch-up shows it (masked terms only;
// docs/SECURITY.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "oramcore/base/status.h"
#include "oramcore/protocol/client_session.h"
#include "oramcore/protocol/rebuild_report.h"

namespace s3oram {

class CatchUpRun {
 public:
  // Bytes of the buckets sent so far and in all (the total grows when an
  // eviction makes sent buckets stale).
  using Progress = std::function<void(std::uint64_t done_bytes, std::uint64_t total_bytes)>;

  // Starts catching up the excluded server `target` under the client's
  // lease and epoch, with its connections: REBUILD_BEGIN (catch-up) at the
  // counters the participants have applied. Unavailable: the server still
  // does not answer, or a participant is between two evictions (try
  // later); FailedPrecondition (naming the fix): it is suspect, holds no
  // store of this filesystem to catch up, or missed more than half the
  // tree. Nothing was changed on any server then.
  // `range_bytes`: the most one step sends (at least one bucket).
  static Result<std::unique_ptr<CatchUpRun>> Start(ClientSession& session, std::size_t target,
                                                   Progress progress = {},
                                                   std::size_t range_bytes = kRangeBytes);
  ~CatchUpRun();
  CatchUpRun(const CatchUpRun&) = delete;
  CatchUpRun& operator=(const CatchUpRun&) = delete;

  std::size_t target() const;
  // Sends the next range of the buckets the server misses, as the
  // participants hold them now, leaving the root and what the next
  // kEvictionsAhead evictions rewrite to the last pass. True when nothing
  // else is stale (then nothing was sent; called again later, it sends
  // what the evictions since made stale), or when 2 * kMaxPasses times
  // what the server missed was sent. Past kMaxPasses times that (the
  // accesses make buckets stale about as fast as one range a step sends
  // them), a step sends ranges for up to kBurst.
  Result<bool> CopyNext();
  // The last pass (see above). The caller has settled the eviction and
  // the root writes. Does not readmit the server.
  Result<RebuildReport> Finish();

  static constexpr std::uint64_t kMaxPasses = 4;
  static constexpr std::uint64_t kEvictionsAhead = 2;
  static constexpr std::chrono::milliseconds kBurst{300};
  // A mount's accesses wait for at most one range at a time.
  static constexpr std::size_t kRangeBytes = std::size_t{4} << 20;

 private:
  struct Impl;
  explicit CatchUpRun(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace s3oram

#pragma once
// BatchSlicer: how many of a batch's accesses the ORAM engine runs before it
// lets a waiting read in (write-back throttling in the manner of Linux's
// blk-wbt: queue depth lowered while reads are slow).
//
// Why: a write-back batch pipelines up to eight accesses under the engine's
// lock. On an aged filesystem such a batch takes 3-6 s, and a read of another
// file that arrives just after it starts waits for all of it. While reads
// have recently waited longer than the slice, the engine runs a batch in
// pieces sized to take about one slice each (from the time recent pieces took
// per access) and releases its lock between them, so a read waits for about
// one slice instead of a whole batch. Without such reads batches go whole:
// on a slow link pipelining is what keeps the uplink busy, and splitting
// costs throughput there for no one's benefit.
//
// Splitting changes nothing the servers see beyond timing: the pieces are
// the same accesses, in the same order, as the batch sent whole (each access
// is one retrieval and one root write either way). Pure: time is passed in.
#include <chrono>
#include <cstddef>

namespace s3oram::fs {

class BatchSlicer {
 public:
  using Clock = std::chrono::steady_clock;

  // `pipeline`: the most accesses a piece holds (the engine's batch).
  // `slice`: what a piece may take while reads are waiting, and the read
  // wait that counts as one. `window`: how long a slow read keeps batches
  // sliced.
  BatchSlicer(std::size_t pipeline, Clock::duration slice, Clock::duration window);

  // A read waited `waited` for the engine (the batches ahead of it): at
  // least a slice throttles (a slice of zero: every read does).
  void NoteReadWait(Clock::duration waited, Clock::time_point now);
  // A piece of `accesses` accesses took `took` (its accesses in flight
  // together).
  void NotePiece(std::size_t accesses, Clock::duration took);

  // How many of the `remaining` accesses the next piece holds (at least one).
  std::size_t NextPiece(std::size_t remaining, Clock::time_point now) const;

  // True while reads have waited recently (batches are sliced).
  bool Throttled(Clock::time_point now) const { return now < throttled_until_; }
  Clock::duration slice() const { return slice_; }
  // Seconds per access, as recent pieces took them (zero: none measured).
  Clock::duration per_access() const { return per_access_; }

  static constexpr Clock::duration kDefaultSlice = std::chrono::seconds(1);
  static constexpr Clock::duration kDefaultWindow = std::chrono::seconds(30);

 private:
  const std::size_t pipeline_;
  const Clock::duration slice_;
  const Clock::duration window_;
  Clock::time_point throttled_until_{};
  Clock::duration per_access_{};  // exponentially weighted, 1/4 per piece
};

}  // namespace s3oram::fs

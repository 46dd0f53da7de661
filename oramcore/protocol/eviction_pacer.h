#pragma once
// EvictionPacer: spreads the wait for a background eviction over the round of
// accesses beside it.
//
// Eviction r is computed while the A accesses of round r + 1 go on, and must
// commit before round r + 2 starts. When the accesses are faster than the
// eviction, the client waits at the end of the round for all the rest of it:
// one access waits most of an eviction (tens of seconds at 256 KiB blocks)
// while the others did not wait at all. The pacer lets access i of the round
// start no earlier than estimate * i / A after the eviction started, so the
// same total wait falls in slices of about estimate / A, none long. It changes
// neither the order nor the content of any message (only when the client
// sends them), and a round that is slower than the estimate is never slowed.
//
// The estimate is the time the servers took for the last eviction, learned at
// each commit: exact when the client had to wait for the result at the end
// (the result came then; at most 4x the previous estimate), and lowered by a
// tenth when the result was ready already (it came at some unknown earlier
// time), so that a pace too slow for the servers of the moment corrects
// itself. A wait counts as one only if it is long against a round trip and
// not negligible against the round, which may include hours of idleness.
// The estimate is kept in the client state. While an eviction runs, the
// client also asks the servers how far they are (STATUS: round k of R after
// e) and extrapolates a provisional figure from that (FromProgress). The pace
// follows the larger of the two: the first eviction of a new state, which has
// no estimate, is paced by its progress alone, and an eviction slower than
// the last (the first ones of a young tree grow as buckets fill) is paced by
// its progress instead of a learned figure that is too short. Pure: time is
// passed in.
#include <chrono>
#include <cstdint>

namespace s3oram {

class EvictionPacer {
 public:
  using Duration = std::chrono::nanoseconds;

  explicit EvictionPacer(Duration estimate = Duration::zero()) : estimate_(estimate) {}

  // How long the access after `done` accesses of a round of `round` must
  // wait, `elapsed` after the eviction beside the round started. Zero when
  // neither an estimate nor a poll is known, or the round is behind the pace.
  Duration Delay(Duration elapsed, std::uint64_t done, std::uint64_t round) const;

  // Delay, bounded: at most the larger of kMaxStep and two even slices
  // (estimate / round). When a poll's extrapolation raises the pace at once
  // (an early round that ran slowly, or beside other work), the access then
  // due would otherwise wait for the whole difference (17 s once in the
  // aged freeze probe); bounded, the next accesses catch up on it a slice
  // at a time, and whatever is still missing at the round's end is waited
  // for there, as without a pacer.
  Duration Step(Duration elapsed, std::uint64_t done, std::uint64_t round) const;
  static constexpr Duration kMaxStep = std::chrono::seconds(2);

  // The eviction beside a round committed. `elapsed`: from its start to the
  // moment the client asked for its result; `waited`: how long the client
  // then waited for that result.
  void Learn(Duration elapsed, Duration waited);

  Duration estimate() const { return estimate_; }

  // What a server's progress says of the whole eviction's time: in round
  // `round` (1-based) of `rounds`, `elapsed` after it started. Rounds cost
  // alike (each combines one level's buckets) except the last, the leaf's,
  // which combines two and costs double: R + 1 units in all. The k - 1
  // units done took at most `elapsed`, the units through round k at least
  // that, so the whole lies between lower = elapsed * (R + 1) / u_k (u_k = k,
  // or R + 1 in the last round) and upper = elapsed * (R + 1) / (k - 1) (no
  // upper bound in round 1: zero). Both zero for a progress that says
  // nothing.
  struct Bounds {
    Duration lower = Duration::zero();
    Duration upper = Duration::zero();  // zero: unknown
  };
  static Bounds FromProgress(Duration elapsed, std::uint32_t round, std::uint32_t rounds);

  // One poll of the servers' progress, the slowest server's bounds. Polls
  // are intersected (the largest lower bound, the smallest upper one), and
  // Delay paces by the larger of the estimate and the middle of what is left
  // (the lower bound while there is no upper one) until the next Learn; the
  // first Learn adopts it, lowered by a tenth, when the result was ready
  // already.
  void Provisional(Bounds poll);
  Duration provisional() const;
  // Drops what the polls said (an eviction ended without Learn).
  void ForgetProvisional() { lower_ = upper_ = Duration::zero(); }

  // A wait for the result shorter than this means it was ready already
  // (the request's round trip, not the computation).
  static constexpr Duration kReadyAlready = std::chrono::milliseconds(200);
  // ...and one shorter than 1/kWaitShare of the round's time too (a slow
  // reply after an idle round is not a measurement).
  static constexpr int kWaitShare = 50;
  // An estimate grows at most this much per eviction.
  static constexpr int kMaxGrowth = 4;

 private:
  Duration estimate_;
  Duration lower_ = Duration::zero();
  Duration upper_ = Duration::zero();  // zero: unknown
};

}  // namespace s3oram

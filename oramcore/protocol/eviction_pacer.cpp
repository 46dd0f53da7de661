#include "oramcore/protocol/eviction_pacer.h"

#include <algorithm>

namespace s3oram {

EvictionPacer::Duration EvictionPacer::Delay(Duration elapsed, std::uint64_t done,
                                             std::uint64_t round) const {
  // The servers' progress can only lengthen the pace: an eviction slower than
  // the last (a tree filling up, a busier host) is paced by what the polls
  // say; a faster one by the learned figure, which Learn then lowers.
  const Duration estimate = std::max(estimate_, provisional());
  if (round == 0 || estimate <= Duration::zero()) return Duration::zero();
  done = std::min(done, round);
  // estimate * done / round without overflow: estimates are minutes at most
  // (well under 2^63 ns / 2^20), rounds are at most a few thousand accesses.
  const auto due = Duration(static_cast<Duration::rep>(
      static_cast<long double>(estimate.count()) * static_cast<long double>(done) /
      static_cast<long double>(round)));
  return due > elapsed ? due - elapsed : Duration::zero();
}

EvictionPacer::Duration EvictionPacer::Step(Duration elapsed, std::uint64_t done,
                                            std::uint64_t round) const {
  const Duration delay = Delay(elapsed, done, round);
  if (delay <= Duration::zero()) return delay;
  const Duration estimate = std::max(estimate_, provisional());
  return std::min(delay, std::max(kMaxStep, 2 * (estimate / static_cast<Duration::rep>(round))));
}

void EvictionPacer::Learn(Duration elapsed, Duration waited) {
  elapsed = std::max(elapsed, Duration::zero());
  // A real wait for the computation is long against the request's round
  // trip and not negligible against the round (whose `elapsed` may include
  // hours of idleness before a slow reply).
  if (waited >= kReadyAlready && waited * kWaitShare >= elapsed) {
    const Duration measured = elapsed + waited;
    estimate_ = estimate_ > Duration::zero() ? std::min(measured, estimate_ * kMaxGrowth)
                                             : measured;
  } else if (estimate_ <= Duration::zero() && provisional() > Duration::zero()) {
    // The first eviction, paced by its progress so well that its result
    // was ready: the servers' own extrapolation is the better figure.
    estimate_ = std::min(provisional(), std::max(elapsed, kReadyAlready)) * 9 / 10;
  } else {
    // No estimate yet counts as none smaller than `elapsed`.
    const Duration bound = estimate_ > Duration::zero() ? std::min(estimate_, elapsed) : elapsed;
    estimate_ = bound * 9 / 10;
  }
  ForgetProvisional();
}

void EvictionPacer::Provisional(Bounds poll) {
  lower_ = std::max(lower_, poll.lower);
  if (poll.upper > Duration::zero()) {
    upper_ = upper_ > Duration::zero() ? std::min(upper_, poll.upper) : poll.upper;
  }
}

EvictionPacer::Duration EvictionPacer::provisional() const {
  // Bounds from polls at different times may cross (rounds are only about
  // alike): the lower bound, a measured fact, wins.
  if (upper_ <= lower_) return lower_;
  return lower_ + (upper_ - lower_) / 2;
}

EvictionPacer::Bounds EvictionPacer::FromProgress(Duration elapsed, std::uint32_t round,
                                                  std::uint32_t rounds) {
  if (elapsed <= Duration::zero() || round == 0 || rounds == 0 || round > rounds) return {};
  // In units of one round's work: the last round (the leaf's) multiplies
  // and re-shares two buckets, every other one, so the whole is R + 1.
  // The rounds before this one are done (round - 1 units, taking at most
  // `elapsed`), this one is not (so all through it take at least `elapsed`).
  // elapsed * units without overflow: the caller bounds elapsed by its own
  // clock (minutes), rounds are a tree height (at most 40).
  const std::int64_t whole = std::int64_t{rounds} + 1;
  const std::int64_t through = round == rounds ? whole : std::int64_t{round};
  Bounds b;
  b.lower = elapsed * whole / through;
  if (round > 1) b.upper = elapsed * whole / (std::int64_t{round} - 1);
  return b;
}

}  // namespace s3oram

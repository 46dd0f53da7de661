#include "oramcore/protocol/eviction_pacer.h"

#include <algorithm>

namespace s3oram {

EvictionPacer::Duration EvictionPacer::Delay(Duration elapsed, std::uint64_t done,
                                             std::uint64_t round) const {
  if (round == 0 || estimate_ <= Duration::zero()) return Duration::zero();
  done = std::min(done, round);
  // estimate * done / round without overflow: estimates are minutes at most
  // (well under 2^63 ns / 2^20), rounds are at most a few thousand accesses.
  const auto due = Duration(static_cast<Duration::rep>(
      static_cast<long double>(estimate_.count()) * static_cast<long double>(done) /
      static_cast<long double>(round)));
  return due > elapsed ? due - elapsed : Duration::zero();
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
  } else {
    // No estimate yet counts as none smaller than `elapsed`.
    const Duration bound = estimate_ > Duration::zero() ? std::min(estimate_, elapsed) : elapsed;
    estimate_ = bound * 9 / 10;
  }
}

}  // namespace s3oram

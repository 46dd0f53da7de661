#include "oramcore/protocol/eviction_pacer.h"

#include <gtest/gtest.h>

namespace s3oram {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(EvictionPacer, NoEstimateNeverDelays) {
  const EvictionPacer pacer;
  EXPECT_EQ(pacer.Delay(seconds(0), 279, 280), EvictionPacer::Duration::zero());
  EXPECT_EQ(pacer.Delay(seconds(0), 0, 0), EvictionPacer::Duration::zero());
}

TEST(EvictionPacer, AccessesAheadOfThePaceWaitForTheirShareOfTheEstimate) {
  const EvictionPacer pacer(seconds(56));
  // Access 0 starts at once; access 140 of 280 not before 28 s.
  EXPECT_EQ(pacer.Delay(seconds(0), 0, 280), EvictionPacer::Duration::zero());
  EXPECT_EQ(pacer.Delay(seconds(20), 140, 280), seconds(8));
  // A round behind the pace is never slowed.
  EXPECT_EQ(pacer.Delay(seconds(30), 140, 280), EvictionPacer::Duration::zero());
  // Back to back, consecutive accesses are estimate / A apart: no wait is
  // longer than one slice.
  const auto slice = pacer.Delay(seconds(0), 1, 280);
  EXPECT_EQ(slice, milliseconds(200));
  for (std::uint64_t i = 1; i < 280; ++i) {
    const auto at = milliseconds(56000) * static_cast<long>(i - 1) / 280;  // previous access starts
    EXPECT_LE(pacer.Delay(at, i, 280), slice) << i;
  }
  // More accesses than the round (cannot happen) wait no longer than the estimate.
  EXPECT_EQ(pacer.Delay(seconds(0), 1000, 280), seconds(56));
}

TEST(EvictionPacer, FirstEstimateFromAResultReadyAlreadyIsBelowTheRound) {
  EvictionPacer pacer;
  pacer.Learn(seconds(40), milliseconds(3));
  EXPECT_EQ(pacer.estimate(), seconds(36));
}

TEST(EvictionPacer, LearnsTheTimeWhenItWaitedAndLowersItWhenTheResultWasReady) {
  EvictionPacer pacer;
  pacer.Learn(seconds(20), seconds(40));  // waited: the servers took 60 s
  EXPECT_EQ(pacer.estimate(), seconds(60));
  pacer.Learn(seconds(61), milliseconds(5));  // ready when asked: 60 s or less
  EXPECT_EQ(pacer.estimate(), seconds(54));
  pacer.Learn(seconds(30), milliseconds(5));  // a slow round: at most 30 s
  EXPECT_EQ(pacer.estimate(), seconds(27));
  pacer.Learn(seconds(27), seconds(3));  // too low: corrected at once
  EXPECT_EQ(pacer.estimate(), seconds(30));
}

// A round left idle for hours, then a slow reply: not a measurement of the
// servers; and no single measurement multiplies the pace by more than 4.
TEST(EvictionPacer, IdleRoundsAndSlowRepliesDoNotInflateTheEstimate) {
  EvictionPacer pacer(seconds(60));
  pacer.Learn(std::chrono::hours(8), milliseconds(900));
  EXPECT_EQ(pacer.estimate(), seconds(54));
  pacer.Learn(seconds(30), seconds(600));
  EXPECT_EQ(pacer.estimate(), seconds(216));
}

// The first eviction of a new state: the servers' progress (round k of R
// after e) extrapolated to the whole eviction, between e R / k and
// e R / (k - 1); a lower bound e R in round 1.
TEST(EvictionPacer, ProgressExtrapolatesTheWholeEviction) {
  EXPECT_EQ(EvictionPacer::FromProgress(seconds(4), 1, 5), seconds(20));
  // Round 3 of 5 after 24 s: two rounds took 16 to 24 s, so 40 to 60 s.
  EXPECT_EQ(EvictionPacer::FromProgress(seconds(24), 3, 5), seconds(50));
  EXPECT_EQ(EvictionPacer::FromProgress(seconds(24), 0, 5), EvictionPacer::Duration::zero());
  EXPECT_EQ(EvictionPacer::FromProgress(seconds(24), 6, 5), EvictionPacer::Duration::zero());
  EXPECT_EQ(EvictionPacer::FromProgress(seconds(0), 1, 5), EvictionPacer::Duration::zero());
}

TEST(EvictionPacer, AProvisionalEstimatePacesUntilTheFirstIsLearned) {
  EvictionPacer pacer;
  pacer.Provisional(seconds(20));
  pacer.Provisional(seconds(10));  // the largest is kept (the slowest server)
  EXPECT_EQ(pacer.provisional(), seconds(20));
  EXPECT_EQ(pacer.Delay(seconds(5), 140, 280), seconds(5));
  // The first commit found the result ready: the extrapolation is adopted
  // (bounded by the time until the result was asked for).
  pacer.Learn(seconds(25), milliseconds(4));
  EXPECT_EQ(pacer.estimate(), seconds(20));
  EXPECT_EQ(pacer.provisional(), EvictionPacer::Duration::zero());
  // Once an estimate exists, a provisional one does not change the pace.
  pacer.Provisional(seconds(100));
  EXPECT_EQ(pacer.Delay(seconds(5), 140, 280), seconds(5));

  // A first commit that waited measures the eviction itself.
  EvictionPacer waited;
  waited.Provisional(seconds(20));
  waited.Learn(seconds(25), seconds(10));
  EXPECT_EQ(waited.estimate(), seconds(35));
}

}  // namespace
}  // namespace s3oram

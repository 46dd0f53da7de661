#include "oramcore/protocol/eviction_pacer.h"

#include <gtest/gtest.h>

#include <utility>

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
// after e) bounds the whole eviction between e R / k and e R / (k - 1).
TEST(EvictionPacer, ProgressBoundsTheWholeEviction) {
  // Five rounds, the last (the leaf's) costing two: six units in all.
  auto b = EvictionPacer::FromProgress(seconds(4), 1, 5);
  EXPECT_EQ(b.lower, seconds(24));
  EXPECT_EQ(b.upper, EvictionPacer::Duration::zero()) << "no upper bound in round 1";
  // Round 3 of 5 after 24 s: two units took 16 to 24 s, so 48 to 72 s.
  b = EvictionPacer::FromProgress(seconds(24), 3, 5);
  EXPECT_EQ(b.lower, seconds(48));
  EXPECT_EQ(b.upper, seconds(72));
  // In the leaf round after 40 s: four units took at most 40 s, all six at
  // least 40 s, so 40 to 60 s.
  b = EvictionPacer::FromProgress(seconds(40), 5, 5);
  EXPECT_EQ(b.lower, seconds(40));
  EXPECT_EQ(b.upper, seconds(60));
  for (auto [round, rounds] : {std::pair{0u, 5u}, std::pair{6u, 5u}, std::pair{1u, 0u}}) {
    b = EvictionPacer::FromProgress(seconds(24), round, rounds);
    EXPECT_EQ(b.lower, EvictionPacer::Duration::zero()) << round << "/" << rounds;
  }
  EXPECT_EQ(EvictionPacer::FromProgress(seconds(0), 1, 5).lower, EvictionPacer::Duration::zero());
}

TEST(EvictionPacer, ProvisionalBoundsIntersectAndPaceUntilTheFirstIsLearned) {
  EvictionPacer pacer;
  pacer.Provisional({seconds(20), EvictionPacer::Duration::zero()});
  EXPECT_EQ(pacer.provisional(), seconds(20)) << "only a lower bound: paced by it";
  EXPECT_EQ(pacer.Delay(seconds(5), 140, 280), seconds(5));
  // A poll late in a round gives a loose upper bound, an early one a tight
  // one; the intersection keeps the best of each, and the pace is midway.
  pacer.Provisional({seconds(30), seconds(60)});
  pacer.Provisional({seconds(25), seconds(40)});
  EXPECT_EQ(pacer.provisional(), seconds(35));
  // Crossed bounds: the lower one, a measured fact, wins.
  pacer.Provisional({seconds(45), seconds(44)});
  EXPECT_EQ(pacer.provisional(), seconds(45));
  // The first commit found the result ready: the extrapolation is adopted,
  // lowered by a tenth as every estimate from a ready result is.
  pacer.Learn(seconds(50), milliseconds(4));
  EXPECT_EQ(pacer.estimate(), seconds(40) + milliseconds(500));
  EXPECT_EQ(pacer.provisional(), EvictionPacer::Duration::zero());
  // Once an estimate exists, a poll that says this eviction is faster does
  // not shorten the pace...
  pacer.Provisional({seconds(10), seconds(12)});
  EXPECT_EQ(pacer.Delay(seconds(5), 140, 280), seconds(15) + milliseconds(250));
  // ...and one that says it is slower than the last lengthens it.
  pacer.Provisional({seconds(100), EvictionPacer::Duration::zero()});
  EXPECT_EQ(pacer.provisional(), seconds(100));
  EXPECT_EQ(pacer.Delay(seconds(5), 140, 280), seconds(45));
  // The commit forgets the polls; the estimate learned is the measured one.
  pacer.Learn(seconds(80), seconds(20));
  EXPECT_EQ(pacer.estimate(), seconds(100));
  EXPECT_EQ(pacer.provisional(), EvictionPacer::Duration::zero());

  // A first commit that waited measures the eviction itself.
  EvictionPacer waited;
  waited.Provisional({seconds(20), EvictionPacer::Duration::zero()});
  waited.Learn(seconds(25), seconds(10));
  EXPECT_EQ(waited.estimate(), seconds(35));
  // An eviction that ended without Learn leaves nothing behind.
  EvictionPacer forgot;
  forgot.Provisional({seconds(20), EvictionPacer::Duration::zero()});
  forgot.ForgetProvisional();
  EXPECT_EQ(forgot.Delay(seconds(0), 140, 280), EvictionPacer::Duration::zero());
}

TEST(EvictionPacer, AStepIsBoundedSoAJumpInThePaceIsCaughtUpOnOverSeveralAccesses) {
  EvictionPacer pacer(seconds(56));  // even slices of 200 ms
  EXPECT_EQ(pacer.Step(seconds(0), 0, 280), EvictionPacer::Duration::zero());
  EXPECT_EQ(pacer.Step(seconds(0), 1, 280), milliseconds(200));           // below the bound: Delay
  EXPECT_EQ(pacer.Step(seconds(20), 140, 280), EvictionPacer::kMaxStep);  // Delay says 8 s
  EXPECT_EQ(pacer.Step(seconds(30), 140, 280), EvictionPacer::Duration::zero());
  // A poll raises the pace at once (an early round that ran slowly):
  // Delay would freeze the next access for 22 s; the steps catch up on it
  // over eleven accesses.
  pacer.Provisional({seconds(112), EvictionPacer::Duration::zero()});
  EXPECT_EQ(pacer.Delay(seconds(34), 140, 280), seconds(22));
  // (Accesses that take no time: back on the even pace of 400 ms once
  // caught up.)
  auto at = seconds(34) + EvictionPacer::Duration::zero();
  int steps = 0;
  for (std::uint64_t i = 140; pacer.Step(at, i, 280) > milliseconds(400); ++i) {
    EXPECT_LE(pacer.Step(at, i, 280), EvictionPacer::kMaxStep) << i;
    at += pacer.Step(at, i, 280);
    ASSERT_LT(++steps, 50);
  }
  EXPECT_EQ(steps, 14);  // 22 s caught up 1.6 s per access
  // A slow pace with a short round: two slices (each access's share of the
  // estimate, here 15 s) are allowed, not only kMaxStep.
  const EvictionPacer slow(seconds(60));
  EXPECT_EQ(slow.Step(seconds(0), 2, 4), seconds(30));
  EXPECT_EQ(slow.Step(seconds(0), 3, 4), seconds(30));
}

}  // namespace
}  // namespace s3oram

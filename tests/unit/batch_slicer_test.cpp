// BatchSlicer (fused/batch_slicer.h): batches go whole until a read waits
// longer than the slice, then in pieces sized from the measured time per
// access, for the window after the last such read.
#include "fused/batch_slicer.h"

#include <gtest/gtest.h>

#include <chrono>

namespace s3oram::fs {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = BatchSlicer::Clock;

TEST(BatchSlicerTest, BatchesGoWholeUntilAReadWaitsASlice) {
  BatchSlicer s(8, seconds(1), seconds(30));
  const Clock::time_point t0{};
  s.NotePiece(8, seconds(4));  // 0.5 s per access
  EXPECT_EQ(s.NextPiece(20, t0), 8u);
  EXPECT_EQ(s.NextPiece(3, t0), 3u);
  s.NoteReadWait(milliseconds(999), t0);  // shorter than the slice
  EXPECT_FALSE(s.Throttled(t0));
  EXPECT_EQ(s.NextPiece(20, t0), 8u);
  s.NoteReadWait(milliseconds(1000), t0);
  EXPECT_TRUE(s.Throttled(t0));
  EXPECT_EQ(s.NextPiece(20, t0), 2u);  // 1 s / 0.5 s
  EXPECT_EQ(s.NextPiece(1, t0), 1u);
}

TEST(BatchSlicerTest, ThrottlingEndsAWindowAfterTheLastSlowRead) {
  BatchSlicer s(8, seconds(1), seconds(30));
  const Clock::time_point t0{};
  s.NotePiece(4, seconds(1));  // 0.25 s per access
  s.NoteReadWait(seconds(3), t0);
  EXPECT_EQ(s.NextPiece(8, t0 + seconds(29)), 4u);
  EXPECT_EQ(s.NextPiece(8, t0 + seconds(30)), 8u);
  s.NoteReadWait(seconds(2), t0 + seconds(20));  // extends it
  EXPECT_TRUE(s.Throttled(t0 + seconds(49)));
  EXPECT_FALSE(s.Throttled(t0 + seconds(50)));
  // A fast read later does not shorten it.
  s.NoteReadWait(milliseconds(1), t0 + seconds(21));
  EXPECT_TRUE(s.Throttled(t0 + seconds(49)));
}

TEST(BatchSlicerTest, PiecesFollowTheTimePerAccessAndHoldOneAtLeast) {
  BatchSlicer s(8, seconds(1), seconds(30));
  const Clock::time_point t0{};
  // Nothing measured yet: whole, even throttled.
  s.NoteReadWait(seconds(5), t0);
  EXPECT_EQ(s.NextPiece(8, t0), 8u);
  s.NotePiece(1, seconds(3));  // slower than the slice
  EXPECT_EQ(s.NextPiece(8, t0), 1u);
  // Later pieces weigh a quarter: 3 s -> (9 + 0.1) / 4 = 2.275 s per access.
  s.NotePiece(10, seconds(1));
  EXPECT_EQ(s.per_access(), Clock::duration(milliseconds(2275)));
  for (int i = 0; i < 40; ++i) s.NotePiece(10, seconds(1));
  EXPECT_EQ(s.NextPiece(8, t0), 8u);  // 0.1 s per access: ten fit, eight allowed
  s.NotePiece(0, seconds(100));       // nothing to learn from
  EXPECT_EQ(s.NextPiece(8, t0), 8u);
}

TEST(BatchSlicerTest, APipelineOfOneIsNeverSplit) {
  BatchSlicer s(1, seconds(1), seconds(30));
  const Clock::time_point t0{};
  s.NotePiece(1, seconds(1));
  s.NoteReadWait(seconds(5), t0);
  EXPECT_EQ(s.NextPiece(5, t0), 1u);
  BatchSlicer zero(0, seconds(1), seconds(30));  // taken as one
  EXPECT_EQ(zero.NextPiece(5, t0), 1u);
}

}  // namespace
}  // namespace s3oram::fs

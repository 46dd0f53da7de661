// SmpInbox (serverd/smp_inbox.h): what one peer can make a server hold is
// bounded per sender, one sender never displaces another's shares, and
// nothing a peer sends ends another attempt's entries.
#include "serverd/smp_inbox.h"

#include <gtest/gtest.h>

namespace s3oram::serverd {
namespace {

std::vector<field::Elem> Shares(field::Elem v) { return std::vector<field::Elem>(4, v); }

TEST(SmpInboxTest, ASenderIsBoundedAndDisplacesOnlyItsOwnEntries) {
  SmpInbox inbox;
  // Peer 2's honest shares of eviction 5, attempt 1, rounds 0 and 1.
  inbox.Put({5, 1, 0, 2}, Shares(20), 0);
  inbox.Put({5, 1, 1, 2}, Shares(21), 0);
  // Peer 1 floods: many attempts and rounds, a higher attempt among them.
  for (std::uint32_t attempt = 1; attempt < 50; ++attempt) {
    for (std::uint32_t round = 0; round < 4; ++round) {
      inbox.Put({5, attempt, round, 1}, Shares(1), 0);
    }
  }
  EXPECT_EQ(inbox.CountFrom(1), SmpInbox::kPerSender);
  EXPECT_EQ(inbox.CountFrom(2), 2u);
  ASSERT_TRUE(inbox.Has({5, 1, 0, 2}));
  ASSERT_TRUE(inbox.Has({5, 1, 1, 2}));
  EXPECT_EQ(inbox.At({5, 1, 1, 2}), Shares(21));
  // The flood kept its newest entries, not its oldest.
  EXPECT_TRUE(inbox.Has({5, 49, 3, 1}));
  EXPECT_FALSE(inbox.Has({5, 1, 0, 1}));
}

TEST(SmpInboxTest, CommittedEvictionsAreDroppedAndReleaseHandsTheVectorBack) {
  SmpInbox inbox;
  inbox.Put({3, 1, 0, 1}, Shares(3), 0);
  inbox.Put({4, 1, 0, 2}, Shares(4), 0);
  // Eviction 3 committed here: its shares go, and late ones are not kept.
  inbox.Put({4, 1, 1, 2}, Shares(5), 4);
  EXPECT_FALSE(inbox.Has({3, 1, 0, 1}));
  inbox.Put({3, 2, 0, 1}, Shares(6), 4);
  EXPECT_FALSE(inbox.Has({3, 2, 0, 1}));
  EXPECT_EQ(inbox.size(), 2u);
  EXPECT_EQ(inbox.Release({4, 1, 0, 2}), Shares(4));
  EXPECT_TRUE(inbox.Release({4, 1, 0, 2}).empty());
  EXPECT_EQ(inbox.size(), 1u);
}

}  // namespace
}  // namespace s3oram::serverd

// Tree geometry: heap numbering, paths, siblings and the reverse-lexicographic
// eviction order whose "every bucket of level d once per 2^d evictions" property
// the overflow model in params.h relies on.
#include "oramcore/tree/geometry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "oramcore/tree/eviction_footprint.h"

namespace s3oram {
namespace {

TEST(GeometryTest, Sizes) {
  const TreeGeometry g{3, 5};
  EXPECT_EQ(g.num_buckets(), 15u);
  EXPECT_EQ(g.num_leaves(), 8u);
  EXPECT_EQ(g.first_leaf(), 8u);
  EXPECT_EQ(g.levels(), 4u);
  EXPECT_EQ(g.path_slots(), 20u);
  EXPECT_EQ(g.total_slots(), 75u);
  EXPECT_FALSE(g.is_leaf(7));
  EXPECT_TRUE(g.is_leaf(8));
  EXPECT_TRUE(g.is_leaf(15));
  EXPECT_FALSE(g.is_leaf(16));

  const TreeGeometry tall{40, 1};
  EXPECT_EQ(tall.num_buckets(), (std::uint64_t{1} << 41) - 1);
  EXPECT_EQ(tall.num_leaves(), std::uint64_t{1} << 40);
}

TEST(GeometryTest, LevelOf) {
  EXPECT_EQ(TreeGeometry::LevelOf(1), 0u);
  EXPECT_EQ(TreeGeometry::LevelOf(2), 1u);
  EXPECT_EQ(TreeGeometry::LevelOf(3), 1u);
  EXPECT_EQ(TreeGeometry::LevelOf(4), 2u);
  EXPECT_EQ(TreeGeometry::LevelOf(7), 2u);
  EXPECT_EQ(TreeGeometry::LevelOf(8), 3u);
  EXPECT_EQ(TreeGeometry::LevelOf(std::uint64_t{1} << 40), 40u);
  EXPECT_EQ(TreeGeometry::LevelOf((std::uint64_t{1} << 41) - 1), 40u);
}

TEST(GeometryTest, Sibling) {
  EXPECT_EQ(TreeGeometry::Sibling(2), 3u);
  EXPECT_EQ(TreeGeometry::Sibling(3), 2u);
  EXPECT_EQ(TreeGeometry::Sibling(8), 9u);
  EXPECT_EQ(TreeGeometry::Sibling(15), 14u);
  for (BucketId b = 2; b < 1024; ++b) {
    const BucketId s = TreeGeometry::Sibling(b);
    EXPECT_NE(s, b);
    EXPECT_EQ(TreeGeometry::Sibling(s), b);
    EXPECT_EQ(s >> 1, b >> 1) << "siblings share a parent";
    EXPECT_EQ(TreeGeometry::LevelOf(s), TreeGeometry::LevelOf(b));
  }
}

TEST(GeometryTest, BucketOnPathWalksRootToLeaf) {
  const TreeGeometry g{3, 4};
  // Leaf 13 = 0b1101: root 1, then 0b11 = 3, 0b110 = 6, 0b1101 = 13.
  EXPECT_EQ(g.BucketOnPath(13, 0), 1u);
  EXPECT_EQ(g.BucketOnPath(13, 1), 3u);
  EXPECT_EQ(g.BucketOnPath(13, 2), 6u);
  EXPECT_EQ(g.BucketOnPath(13, 3), 13u);

  for (std::uint32_t h = 1; h <= 12; ++h) {
    const TreeGeometry t{h, 1};
    for (LeafId leaf = t.first_leaf(); leaf < 2 * t.first_leaf(); ++leaf) {
      EXPECT_EQ(t.BucketOnPath(leaf, 0), 1u);
      EXPECT_EQ(t.BucketOnPath(leaf, h), leaf);
      for (std::uint32_t d = 0; d <= h; ++d) {
        const BucketId b = t.BucketOnPath(leaf, d);
        ASSERT_EQ(TreeGeometry::LevelOf(b), d);
        if (d > 0) {
          ASSERT_EQ(b >> 1, t.BucketOnPath(leaf, d - 1)) << "path is parent-linked";
        }
      }
    }
  }
}

TEST(GeometryTest, EveryBucketIsOnTheSameNumberOfPaths) {
  // A bucket of level d is an ancestor of exactly 2^(H-d) leaves.
  const TreeGeometry g{6, 1};
  std::vector<std::uint64_t> count(g.num_buckets() + 1, 0);
  for (LeafId leaf = g.first_leaf(); leaf < 2 * g.first_leaf(); ++leaf) {
    for (std::uint32_t d = 0; d <= g.height; ++d) ++count[g.BucketOnPath(leaf, d)];
  }
  for (BucketId b = 1; b <= g.num_buckets(); ++b) {
    EXPECT_EQ(count[b], std::uint64_t{1} << (g.height - TreeGeometry::LevelOf(b))) << b;
  }
}

TEST(GeometryTest, EvictionLeafIsReverseLexicographic) {
  const TreeGeometry g{3, 4};
  const std::vector<LeafId> expected = {8, 12, 10, 14, 9, 13, 11, 15};
  for (std::uint64_t ne = 0; ne < 8; ++ne) EXPECT_EQ(g.EvictionLeaf(ne), expected[ne]) << ne;
  // The order repeats with period 2^H.
  for (std::uint64_t ne = 0; ne < 8; ++ne) {
    EXPECT_EQ(g.EvictionLeaf(ne + 8), expected[ne]);
    EXPECT_EQ(g.EvictionLeaf(ne + (std::uint64_t{1} << 40)), expected[ne]);
  }

  const TreeGeometry h1{1, 1};
  EXPECT_EQ(h1.EvictionLeaf(0), 2u);
  EXPECT_EQ(h1.EvictionLeaf(1), 3u);
}

TEST(GeometryTest, EvictionPathsAreAllLeaves) {
  for (std::uint32_t h = 1; h <= 10; ++h) {
    const TreeGeometry g{h, 1};
    std::set<LeafId> leaves;
    for (std::uint64_t ne = 0; ne < g.num_leaves(); ++ne) {
      const LeafId leaf = g.EvictionLeaf(ne);
      ASSERT_TRUE(g.is_leaf(leaf));
      leaves.insert(leaf);
    }
    EXPECT_EQ(leaves.size(), g.num_leaves()) << "a period of 2^H evictions covers every leaf";
  }
}

// The property the overflow bound rests on: in ANY window of 2^d consecutive
// evictions (not only aligned ones, and across the 2^H wrap-around) every
// bucket of level d is on exactly one eviction path.
TEST(GeometryTest, EachLevelBucketEvictedOncePerWindow) {
  for (std::uint32_t h = 1; h <= 10; ++h) {
    const TreeGeometry g{h, 1};
    const std::uint64_t period = g.num_leaves();
    // Window starts: every offset in one period, plus a few far-away ones.
    std::vector<std::uint64_t> starts;
    for (std::uint64_t s = 0; s < period; ++s) starts.push_back(s);
    starts.push_back((std::uint64_t{1} << 40) - 3);
    starts.push_back((std::uint64_t{1} << 62) + 12345);

    for (std::uint32_t d = 0; d <= h; ++d) {
      const std::uint64_t window = std::uint64_t{1} << d;
      const BucketId first = std::uint64_t{1} << d;  // buckets of level d: [2^d, 2^(d+1))
      std::vector<std::uint32_t> hits(window);
      for (std::uint64_t s : starts) {
        std::fill(hits.begin(), hits.end(), 0u);
        for (std::uint64_t ne = s; ne < s + window; ++ne) {
          ++hits[g.BucketOnPath(g.EvictionLeaf(ne), d) - first];
        }
        for (std::uint64_t i = 0; i < window; ++i) {
          ASSERT_EQ(hits[i], 1u) << "H=" << h << " level=" << d << " start=" << s
                                 << " bucket=" << first + i;
        }
      }
    }
  }
}

// Against a per-bucket reference: a bucket of level d >= 1 is rewritten by
// eviction e exactly when its parent lies on e's path (it is on the path or
// the sibling of the bucket that is); the root always counts.
TEST(EvictionFootprintTest, MatchesTheBucketsEachEvictionRewrites) {
  for (std::uint32_t h : {1u, 2u, 3u, 5u}) {
    const TreeGeometry g{h, 4};
    for (std::uint64_t from : {0ull, 1ull, 5ull, 37ull}) {
      for (std::uint64_t n : {0ull, 1ull, 2ull, 3ull, 7ull, 40ull}) {
        const std::vector<bool> got = BucketsRewrittenBy(g, from, from + n);
        ASSERT_EQ(got.size(), g.num_buckets() + 1);
        EXPECT_FALSE(got[0]);
        EXPECT_TRUE(got[1]);
        for (BucketId b = 2; b <= g.num_buckets(); ++b) {
          const std::uint32_t d = TreeGeometry::LevelOf(b);
          bool want = false;
          for (std::uint64_t e = from; e < from + n; ++e) {
            want |= g.BucketOnPath(g.EvictionLeaf(e), d - 1) == b / 2;
          }
          ASSERT_EQ(got[b], want) << "H=" << h << " from=" << from << " n=" << n << " b=" << b;
        }
      }
    }
  }
}

// 2^H evictions rewrite every bucket; one rewrites 2H + 1 (the root included).
TEST(EvictionFootprintTest, OneEvictionIsTwoPerLevelAndAFullRoundIsEverything) {
  const TreeGeometry g{6, 4};
  const auto one = BucketsRewrittenBy(g, 11, 12);
  EXPECT_EQ(std::count(one.begin(), one.end(), true), 2 * 6 + 1);
  const auto round = BucketsRewrittenBy(g, 3, 3 + g.num_leaves());
  EXPECT_EQ(std::count(round.begin(), round.end(), true),
            static_cast<std::ptrdiff_t>(g.num_buckets()));
}

}  // namespace
}  // namespace s3oram

#include "oramcore/tree/position_map.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <new>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "oramcore/tree/planner.h"
#include "tests/support/test_seed.h"

// Counting global allocator: lets SteadyStateDoesNotAllocate observe that the
// bucket index reuses its storage. Only counts; behaviour is malloc/free.
namespace {
std::atomic<std::uint64_t> g_allocations{0};
}  // namespace

// noinline: inlined into callers, free() next to a new-expression trips gcc's
// -Wmismatched-new-delete although the pair is consistent (malloc/free).
[[gnu::noinline]] void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace s3oram {
namespace {

// Snapshot of everything observable, to check that failed calls change nothing.
struct Snapshot {
  std::vector<std::optional<std::pair<Position, std::uint64_t>>> entries;  // pos, version
  std::vector<std::vector<BlockId>> buckets;
  std::uint64_t live = 0;
  bool operator==(const Snapshot&) const = default;
};

Snapshot Take(const PositionMap& pm) {
  Snapshot s;
  for (BlockId id = 0; id < pm.capacity(); ++id) {
    const PositionEntry* e = pm.Find(id);
    if (e != nullptr) {
      s.entries.emplace_back(std::pair{e->pos, e->version});
    } else {
      s.entries.emplace_back(std::nullopt);
    }
  }
  for (BucketId b = 1; b <= pm.geometry().num_buckets(); ++b) {
    auto slots = pm.BucketSlots(b);
    s.buckets.emplace_back(slots.begin(), slots.end());
  }
  s.live = pm.live_blocks();
  return s;
}

constexpr TreeGeometry kGeo{3, 4};  // leaves 8..15, buckets 1..15, Z = 4

TEST(PositionMap, EmptyMap) {
  PositionMap pm(kGeo, 10);
  EXPECT_EQ(pm.capacity(), 10u);
  EXPECT_EQ(pm.live_blocks(), 0u);
  EXPECT_EQ(pm.Find(0), nullptr);
  EXPECT_EQ(pm.Find(10), nullptr);
  EXPECT_EQ(pm.Find(kNoBlock), nullptr);
  for (BucketId b = 1; b <= kGeo.num_buckets(); ++b) {
    EXPECT_TRUE(pm.BucketSlots(b).empty());
    EXPECT_EQ(pm.BucketLoad(b), 0u);
    EXPECT_EQ(pm.Occupant(b, 0), kNoBlock);
  }
  EXPECT_TRUE(pm.CheckInvariants().ok());
}

TEST(PositionMap, PlaceFindRemove) {
  PositionMap pm(kGeo, 10);
  ASSERT_TRUE(pm.Place(3, Position{13, 2, 1}, 7).ok());  // bucket 13 >> 1 = 6
  const PositionEntry* e = pm.Find(3);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->pos, (Position{13, 2, 1}));
  EXPECT_EQ(e->version, 7u);
  EXPECT_EQ(pm.live_blocks(), 1u);
  EXPECT_EQ(pm.Occupant(6, 1), 3u);
  EXPECT_EQ(pm.Occupant(6, 0), kNoBlock);
  EXPECT_EQ(pm.Occupant(6, 4), kNoBlock);  // slot beyond Z
  EXPECT_EQ(pm.BucketLoad(6), 1u);
  auto slots = pm.BucketSlots(6);
  ASSERT_EQ(slots.size(), kGeo.bucket_size);
  EXPECT_EQ(slots[0], kNoBlock);
  EXPECT_EQ(slots[1], 3u);
  EXPECT_EQ(slots[2], kNoBlock);
  EXPECT_EQ(slots[3], kNoBlock);
  EXPECT_TRUE(pm.CheckInvariants().ok());

  ASSERT_TRUE(pm.Place(4, Position{12, 2, 0}, 1).ok());  // same bucket 6 via leaf 12
  EXPECT_EQ(pm.BucketLoad(6), 2u);
  EXPECT_EQ(pm.live_blocks(), 2u);

  pm.Remove(3);
  EXPECT_EQ(pm.Find(3), nullptr);
  EXPECT_EQ(pm.Occupant(6, 1), kNoBlock);
  EXPECT_EQ(pm.BucketLoad(6), 1u);
  EXPECT_EQ(pm.live_blocks(), 1u);
  pm.Remove(3);   // not in the tree: no-op
  pm.Remove(99);  // out of range: no-op
  EXPECT_EQ(pm.live_blocks(), 1u);
  pm.Remove(4);
  EXPECT_TRUE(pm.BucketSlots(6).empty());
  EXPECT_EQ(pm.BucketLoad(6), 0u);
  EXPECT_EQ(pm.live_blocks(), 0u);
  EXPECT_TRUE(pm.CheckInvariants().ok());
}

TEST(PositionMap, PlaceRejectsInvalidAndChangesNothing) {
  PositionMap pm(kGeo, 10);
  ASSERT_TRUE(pm.Place(1, Position{8, 3, 2}, 1).ok());
  ASSERT_TRUE(pm.Place(2, Position{9, 0, 0}, 5).ok());
  const Snapshot before = Take(pm);

  const Status beyond = pm.Place(10, Position{8, 0, 0}, 1);
  EXPECT_EQ(beyond.code(), Status::Code::kInvalidArgument);
  constexpr auto kInvalid = Status::Code::kInvalidArgument;
  EXPECT_EQ(pm.Place(3, Position{0, 0, 0}, 1).code(), kInvalid);   // "not in the tree"
  EXPECT_EQ(pm.Place(3, Position{7, 0, 0}, 1).code(), kInvalid);   // internal bucket
  EXPECT_EQ(pm.Place(3, Position{16, 0, 0}, 1).code(), kInvalid);  // past the last leaf
  EXPECT_EQ(pm.Place(3, Position{8, 4, 0}, 1).code(), kInvalid);   // level > H
  EXPECT_EQ(pm.Place(3, Position{8, 0, 4}, 1).code(), kInvalid);   // slot >= Z
  // Slot held by another block, reached through the same leaf or another one.
  EXPECT_EQ(pm.Place(3, Position{8, 3, 2}, 1).code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(pm.Place(3, Position{15, 0, 0}, 1).code(), Status::Code::kFailedPrecondition);
  // Moving an existing block onto an occupied slot fails and keeps it where it was.
  const Status taken = pm.Place(2, Position{8, 3, 2}, 6);
  EXPECT_EQ(taken.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(taken.message().find("bucket 8"), std::string::npos) << taken.ToString();

  EXPECT_EQ(Take(pm), before);
  EXPECT_TRUE(pm.CheckInvariants().ok());
}

TEST(PositionMap, ReplaceMovesAndFreesTheOldSlot) {
  PositionMap pm(kGeo, 4);
  ASSERT_TRUE(pm.Place(0, Position{8, 0, 0}, 1).ok());
  ASSERT_TRUE(pm.Place(0, Position{11, 1, 3}, 2).ok());  // root -> bucket 2
  EXPECT_EQ(pm.live_blocks(), 1u);
  EXPECT_TRUE(pm.BucketSlots(1).empty());
  EXPECT_EQ(pm.Occupant(2, 3), 0u);
  EXPECT_EQ(pm.Find(0)->version, 2u);

  // Same physical slot reached through another leaf: only the entry changes.
  ASSERT_TRUE(pm.Place(0, Position{10, 1, 3}, 3).ok());
  EXPECT_EQ(pm.Find(0)->pos, (Position{10, 1, 3}));
  EXPECT_EQ(pm.Find(0)->version, 3u);
  EXPECT_EQ(pm.BucketLoad(2), 1u);
  EXPECT_EQ(pm.live_blocks(), 1u);

  // Same position again is a no-op apart from the version.
  ASSERT_TRUE(pm.Place(0, Position{10, 1, 3}, 4).ok());
  EXPECT_EQ(pm.Find(0)->version, 4u);
  EXPECT_EQ(pm.BucketLoad(2), 1u);

  // Another slot of the same bucket.
  ASSERT_TRUE(pm.Place(0, Position{10, 1, 0}, 5).ok());
  EXPECT_EQ(pm.Occupant(2, 3), kNoBlock);
  EXPECT_EQ(pm.Occupant(2, 0), 0u);
  EXPECT_EQ(pm.BucketLoad(2), 1u);
  EXPECT_TRUE(pm.CheckInvariants().ok());

  // A removed block keeps its last version for the next write to continue from.
  pm.Remove(0);
  EXPECT_EQ(pm.Find(0), nullptr);
  ASSERT_TRUE(pm.Place(0, Position{9, 0, 1}, 6).ok());
  EXPECT_EQ(pm.Find(0)->version, 6u);
  EXPECT_TRUE(pm.CheckInvariants().ok());
}

TEST(PositionMap, FullBucket) {
  PositionMap pm(kGeo, 8);
  for (std::uint32_t s = 0; s < kGeo.bucket_size; ++s) {
    ASSERT_TRUE(pm.Place(s, Position{8 + s, 0, s}, 1).ok());
  }
  EXPECT_EQ(pm.BucketLoad(1), kGeo.bucket_size);
  for (std::uint32_t s = 0; s < kGeo.bucket_size; ++s) EXPECT_EQ(pm.BucketSlots(1)[s], s);
  EXPECT_EQ(pm.Place(7, Position{8, 0, 0}, 1).code(), Status::Code::kFailedPrecondition);
  EXPECT_TRUE(pm.CheckInvariants().ok());
}

// Random Place/Remove against a naive reference (block -> position, and the
// slot table it implies), comparing every observable after every operation.
TEST(PositionMap, RandomizedAgainstReference) {
  auto rng = testing::SeededRng();
  for (const TreeGeometry geo : {TreeGeometry{1, 2}, TreeGeometry{3, 4}, TreeGeometry{6, 3}}) {
    SCOPED_TRACE("H=" + std::to_string(geo.height) + " Z=" + std::to_string(geo.bucket_size));
    const std::uint64_t capacity = geo.num_leaves() * 2;
    PositionMap pm(geo, capacity);
    std::map<BlockId, PositionEntry> ref;
    std::map<std::pair<BucketId, std::uint32_t>, BlockId> slots;
    std::uniform_int_distribution<BlockId> any_id(0, capacity);  // one past: rejected
    std::uniform_int_distribution<LeafId> any_leaf(geo.first_leaf(), 2 * geo.first_leaf() - 1);
    std::uniform_int_distribution<std::uint32_t> any_level(0, geo.height);
    std::uniform_int_distribution<std::uint32_t> any_slot(0, geo.bucket_size - 1);
    std::uint64_t version = 0;

    for (int op = 0; op < 20000; ++op) {
      const BlockId id = any_id(rng);
      if (rng() % 4 == 0) {
        pm.Remove(id);
        if (auto it = ref.find(id); it != ref.end()) {
          const Position& p = it->second.pos;
          slots.erase({geo.BucketOnPath(p.leaf, p.level), p.slot});
          ref.erase(it);
        }
      } else {
        const Position pos{any_leaf(rng), any_level(rng), any_slot(rng)};
        const std::pair<BucketId, std::uint32_t> key{geo.BucketOnPath(pos.leaf, pos.level),
                                                     pos.slot};
        const auto holder = slots.find(key);
        const bool should_fail =
            id >= capacity || (holder != slots.end() && holder->second != id);
        const Status st = pm.Place(id, pos, ++version);
        ASSERT_EQ(st.ok(), !should_fail) << st.ToString();
        if (st.ok()) {
          if (auto it = ref.find(id); it != ref.end()) {
            const Position& p = it->second.pos;
            slots.erase({geo.BucketOnPath(p.leaf, p.level), p.slot});
          }
          ref[id] = PositionEntry{pos, version};
          slots[key] = id;
        }
      }
      ASSERT_EQ(pm.live_blocks(), ref.size());
      if (id < capacity) {
        const PositionEntry* e = pm.Find(id);
        auto it = ref.find(id);
        ASSERT_EQ(e != nullptr, it != ref.end());
        if (e != nullptr) {
          EXPECT_EQ(e->pos, it->second.pos);
          EXPECT_EQ(e->version, it->second.version);
        }
      }
      if (op % 500 == 0 || op == 19999) {
        ASSERT_TRUE(pm.CheckInvariants().ok()) << pm.CheckInvariants().ToString();
        for (BucketId b = 1; b <= geo.num_buckets(); ++b) {
          std::uint32_t load = 0;
          auto span = pm.BucketSlots(b);
          for (std::uint32_t s = 0; s < geo.bucket_size; ++s) {
            auto it = slots.find({b, s});
            const BlockId expect = it == slots.end() ? kNoBlock : it->second;
            ASSERT_EQ(pm.Occupant(b, s), expect) << "bucket " << b << " slot " << s;
            if (expect != kNoBlock) {
              ++load;
              ASSERT_EQ(span.size(), geo.bucket_size);
              ASSERT_EQ(span[s], expect);
            }
          }
          ASSERT_EQ(pm.BucketLoad(b), load);
          ASSERT_EQ(span.empty(), load == 0) << "bucket " << b;
        }
      }
    }
  }
}

// The real workload (accesses: remove a block, write it to a root slot; every
// A accesses an eviction's moves) allocates nothing in the position map once
// warmed up: nodes of emptied buckets are reused. Only the map's own calls are
// inside the counted window; planning allocates its plan and is not counted.
TEST(PositionMap, SteadyStateDoesNotAllocate) {
  const std::uint32_t A = 4;
  const TreeGeometry geo{5, 40};  // Z well above the safe size for A = 4, H = 5
  const std::uint64_t N = std::uint64_t{A} << (geo.height - 1);
  PositionMap pm(geo, N);
  std::mt19937_64 rng(1);  // workload shape only; correctness is tested in planner_test
  std::uint64_t ne = 0;
  std::uint64_t counted = 0;
  auto run = [&](int evictions) {
    for (int e = 0; e < evictions; ++e) {
      for (std::uint32_t nr = 0; nr < A; ++nr) {
        const BlockId id = rng() % N;
        const LeafId leaf = geo.first_leaf() + rng() % geo.num_leaves();
        const std::uint64_t before = g_allocations.load();
        pm.Remove(id);
        const Status st = pm.Place(id, Position{leaf, 0, nr}, 1);
        counted += g_allocations.load() - before;
        ASSERT_TRUE(st.ok()) << st.ToString();
      }
      Result<EvictionPlan> plan = PlanEviction(geo, ne++, pm);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      const std::uint64_t before = g_allocations.load();
      // Destinations are empty siblings or free slots, so moving one block at
      // a time never collides (ApplyEviction does the same via a batch).
      for (const auto& [id, pos] : plan->moves) {
        pm.Remove(id);
        if (!pm.Place(id, pos, 1).ok()) ADD_FAILURE() << "move of block " << id;
      }
      counted += g_allocations.load() - before;
    }
  };
  run(3000);  // warm-up: the hash table and the spare pool reach their working size
  ASSERT_TRUE(pm.CheckInvariants().ok());
  counted = 0;
  run(3000);
  ASSERT_TRUE(pm.CheckInvariants().ok());
  EXPECT_EQ(counted, 0u) << "allocations by the position map in 12000 steady-state accesses";
}

}  // namespace
}  // namespace s3oram

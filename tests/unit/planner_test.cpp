#include "oramcore/tree/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "oramcore/tree/params.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

// ---------------------------------------------------------------------------
// Plaintext server model. Each bucket is Z slots of plain integers (absent
// buckets are all zero), and an eviction is executed exactly as planner.h says
// the servers do: for k = 1..H, copy u_{k-1} into s_k if k < H, then
// u_k := [u_{k-1}; u_k] * M_k; finally s_H := [u_{H-1}; s_H] * M'_H, with the
// matrices expanded by ExpandStepMatrix and multiplied with integer arithmetic.
// The model derives the path itself and only takes the matrices from the plan.
class ServerModel {
 public:
  explicit ServerModel(TreeGeometry geo) : geo_(geo) {}

  std::vector<std::uint64_t>& Bucket(BucketId b) {
    return buckets_.try_emplace(b, geo_.bucket_size, 0).first->second;
  }
  std::uint64_t Slot(BucketId b, std::uint32_t slot) const {
    auto it = buckets_.find(b);
    return it == buckets_.end() ? 0 : it->second[slot];
  }

  // Executes the plan's matrices; ASSERTs that the plan has the shape the
  // servers expect (path, sources, targets, 0/1 matrices with at most one 1
  // per column and per row).
  void Evict(const EvictionPlan& plan) {
    const std::uint32_t H = geo_.height;
    const LeafId leaf = geo_.EvictionLeaf(plan.eviction);
    ASSERT_EQ(plan.leaf, leaf);
    ASSERT_EQ(plan.steps.size(), std::size_t{H} + 1);
    for (std::uint32_t k = 1; k <= H; ++k) {
      const BucketId u_prev = leaf >> (H - k + 1);
      const BucketId u = leaf >> (H - k);
      const EvictionStep& step = plan.steps[k - 1];
      ASSERT_EQ(step.source, u_prev) << "step " << k;
      ASSERT_EQ(step.target, u) << "step " << k;
      if (k < H) Bucket(TreeGeometry::Sibling(u)) = Bucket(u_prev);
      ASSERT_NO_FATAL_FAILURE(Multiply(step, Bucket(u_prev), Bucket(u)));
    }
    const EvictionStep& last = plan.steps[H];
    ASSERT_EQ(last.source, leaf >> 1);
    ASSERT_EQ(last.target, TreeGeometry::Sibling(leaf));
    ASSERT_NO_FATAL_FAILURE(Multiply(last, Bucket(leaf >> 1), Bucket(last.target)));
  }

 private:
  void Multiply(const EvictionStep& step, const std::vector<std::uint64_t>& source,
                std::vector<std::uint64_t>& target) {
    const std::uint32_t Z = geo_.bucket_size;
    ASSERT_EQ(step.rows.size(), Z);
    matrix_.assign(std::size_t{2} * Z * Z, 7);  // ExpandStepMatrix must overwrite all of it
    ExpandStepMatrix(step, Z, matrix_);
    std::vector<int> row_ones(2 * Z, 0);
    std::vector<std::uint64_t> out(Z, 0);
    for (std::uint32_t j = 0; j < Z; ++j) {
      int column_ones = 0;
      for (std::uint32_t i = 0; i < 2 * Z; ++i) {
        const field::Elem m = matrix_[std::size_t{i} * Z + j];
        ASSERT_LE(m, 1u) << "matrix entry (" << i << ", " << j << ")";
        column_ones += static_cast<int>(m);
        row_ones[i] += static_cast<int>(m);
        out[j] += (i < Z ? source[i] : target[i - Z]) * m;
      }
      ASSERT_LE(column_ones, 1) << "column " << j;
      ASSERT_EQ(column_ones == 1, step.rows[j] >= 0) << "column " << j;
    }
    for (std::uint32_t i = 0; i < 2 * Z; ++i) ASSERT_LE(row_ones[i], 1) << "row " << i;
    target = out;
  }

  TreeGeometry geo_;
  std::map<BucketId, std::vector<std::uint64_t>> buckets_;
  std::vector<field::Elem> matrix_;
};

// Maximum load seen per level: at the root when it is evicted, at internal
// buckets right after they are filled (their fullest moment: the next step
// empties them), at leaves right after an eviction fills them.
struct Occupancy {
  std::vector<std::uint32_t> max_load;
  std::uint64_t evictions = 0;

  void Record(const EvictionPlan& plan, std::uint32_t root_load) {
    ++evictions;
    max_load[0] = std::max(max_load[0], root_load);
    for (const EvictionStep& step : plan.steps) {
      const auto load = static_cast<std::uint32_t>(
          std::count_if(step.rows.begin(), step.rows.end(), [](std::int32_t r) { return r >= 0; }));
      std::uint32_t& m = max_load[TreeGeometry::LevelOf(step.target)];
      m = std::max(m, load);
    }
  }
  // Levels 1 .. H-1 (0 if there are none). The root always holds exactly A.
  std::uint32_t MaxInternal() const {
    return max_load.size() <= 2 ? 0 : *std::max_element(max_load.begin() + 1, max_load.end() - 1);
  }
  std::string ToString() const {
    std::string s;
    for (std::size_t d = 0; d < max_load.size(); ++d) {
      s += (d ? " " : "") + std::to_string(max_load[d]);
    }
    return s;
  }
};

// The client: accesses and evictions against a position map, optionally
// mirrored on a ServerModel whose contents are checked against the map.
class Driver {
 public:
  Driver(TreeGeometry geo, std::uint32_t A, std::uint64_t N, bool with_model)
      : geo_(geo), A_(A), pm_(geo, N), expected_(N, 0), leaf_(geo.first_leaf(),
        2 * geo.first_leaf() - 1) {
    if (with_model) model_.emplace(geo);
    stats_.max_load.assign(geo.levels(), 0);
  }

  PositionMap& pm() { return pm_; }
  const Occupancy& stats() const { return stats_; }
  std::uint64_t evictions() const { return ne_; }

  // One access to `id`: read it from its position (checking the model holds
  // its latest value there), give it a fresh uniform leaf and write it to root
  // slot nr; every A accesses, evict. Returns the eviction's status.
  Status Access(BlockId id, std::mt19937_64& rng) {
    std::uint64_t version = 0;
    if (const PositionEntry* e = pm_.Find(id)) {
      version = e->version;
      if (model_) {
        const Position p = e->pos;
        const std::uint64_t got = model_->Slot(geo_.BucketOnPath(p.leaf, p.level), p.slot);
        if (got != expected_[id]) {
          return Status::Corruption("block " + std::to_string(id) + " read from leaf " +
                                    std::to_string(p.leaf) + " level " + std::to_string(p.level) +
                                    " slot " + std::to_string(p.slot) + " has value " +
                                    std::to_string(got) + ", expected " +
                                    std::to_string(expected_[id]));
        }
      }
      pm_.Remove(id);
    }
    const Status placed =
        pm_.Place(id, Position{leaf_(rng), 0, static_cast<std::uint32_t>(nr_)}, version + 1);
    if (!placed.ok()) return placed;
    if (model_) model_->Bucket(1)[nr_] = expected_[id] = ++counter_;
    if (++nr_ < A_) return Status::Ok();

    const std::uint32_t root_load = pm_.BucketLoad(1);
    Result<EvictionPlan> plan = PlanEviction(geo_, ne_, pm_);
    if (!plan.ok()) return plan.status();
    if (model_) {
      model_->Evict(*plan);
      if (::testing::Test::HasFatalFailure()) return Status::Corruption("model rejected the plan");
    }
    S3ORAM_RETURN_IF_ERROR(ApplyEviction(*plan, pm_));
    // After an eviction every non-leaf bucket of its path is logically empty.
    for (std::uint32_t level = 0; level < geo_.height; ++level) {
      if (pm_.BucketLoad(geo_.BucketOnPath(plan->leaf, level)) != 0) {
        return Status::Corruption("eviction " + std::to_string(ne_) + " left blocks at level " +
                                  std::to_string(level) + " of its path");
      }
    }
    stats_.Record(*plan, root_load);
    ++ne_;
    nr_ = 0;
    return Status::Ok();
  }

  // Every live block's latest value sits in the model at its mapped slot.
  void CheckModel() const {
    for (BlockId id = 0; id < pm_.capacity(); ++id) {
      const PositionEntry* e = pm_.Find(id);
      if (e == nullptr) continue;
      const Position p = e->pos;
      ASSERT_EQ(model_->Slot(geo_.BucketOnPath(p.leaf, p.level), p.slot), expected_[id])
          << "block " << id << " mapped to leaf " << p.leaf << " level " << p.level << " slot "
          << p.slot << " after " << ne_ << " evictions";
    }
  }
  bool has_model() const { return model_.has_value(); }

 private:
  TreeGeometry geo_;
  std::uint32_t A_;
  PositionMap pm_;
  std::optional<ServerModel> model_;
  std::vector<std::uint64_t> expected_;  // latest value written for each block
  std::uniform_int_distribution<LeafId> leaf_;
  std::uint64_t counter_ = 0;  // values are unique, so a stale copy never matches
  std::uint64_t nr_ = 0;
  std::uint64_t ne_ = 0;
  Occupancy stats_;
};

void ExpectSamePlan(const EvictionPlan& a, const EvictionPlan& b) {
  EXPECT_EQ(a.leaf, b.leaf);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (std::size_t k = 0; k < a.steps.size(); ++k) {
    EXPECT_EQ(a.steps[k].source, b.steps[k].source) << "step " << k;
    EXPECT_EQ(a.steps[k].target, b.steps[k].target) << "step " << k;
    EXPECT_EQ(a.steps[k].rows, b.steps[k].rows) << "step " << k;
  }
  EXPECT_EQ(a.moves, b.moves);
}

// ---------------------------------------------------------------------------
// Hand-checked plans.

// H = 2, Z = 3, eviction 0: path 1 -> 2 -> 4, siblings s_1 = 3, s_2 = 5.
TEST(Planner, HandCheckedPlan) {
  const TreeGeometry geo{2, 3};
  PositionMap pm(geo, 10);
  constexpr BlockId A = 0, B = 1, C = 2, D = 3, E = 4, F = 5;
  ASSERT_TRUE(pm.Place(A, {4, 0, 0}, 1).ok());  // root slot 0, bound for leaf 4
  ASSERT_TRUE(pm.Place(B, {6, 0, 1}, 1).ok());  // root slot 1, bound for leaf 6 (via 3)
  ASSERT_TRUE(pm.Place(C, {5, 0, 2}, 1).ok());  // root slot 2, bound for leaf 5 (via 2)
  ASSERT_TRUE(pm.Place(F, {5, 1, 2}, 1).ok());  // resident of bucket 2, slot 2
  ASSERT_TRUE(pm.Place(D, {4, 2, 0}, 1).ok());  // resident of leaf 4, slot 0
  ASSERT_TRUE(pm.Place(E, {5, 2, 1}, 9).ok());  // resident of leaf 5, slot 1

  Result<EvictionPlan> plan = PlanEviction(geo, 0, pm);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->eviction, 0u);
  EXPECT_EQ(plan->leaf, 4u);
  ASSERT_EQ(plan->steps.size(), 3u);
  // Step 1, root -> 2: A to slot 0, C to slot 1, F stays in slot 2; B rides the copy into 3.
  EXPECT_EQ(plan->steps[0].source, 1u);
  EXPECT_EQ(plan->steps[0].target, 2u);
  EXPECT_EQ(plan->steps[0].rows, (std::vector<std::int32_t>{0, 2, 5}));
  // Step 2, 2 -> leaf 4: D stays in slot 0, A (slot 0 of bucket 2) to slot 1.
  EXPECT_EQ(plan->steps[1].source, 2u);
  EXPECT_EQ(plan->steps[1].target, 4u);
  EXPECT_EQ(plan->steps[1].rows, (std::vector<std::int32_t>{3, 0, -1}));
  // Step 3, 2 -> sibling leaf 5: C (slot 1) to slot 0, E stays in slot 1, F (slot 2) to slot 2.
  EXPECT_EQ(plan->steps[2].source, 2u);
  EXPECT_EQ(plan->steps[2].target, 5u);
  EXPECT_EQ(plan->steps[2].rows, (std::vector<std::int32_t>{1, 4, 2}));

  const std::vector<std::pair<BlockId, Position>> moves{
      {B, {6, 1, 1}}, {A, {4, 2, 1}}, {C, {5, 2, 0}}, {F, {5, 2, 2}}};
  EXPECT_EQ(plan->moves, moves);

  ASSERT_TRUE(ApplyEviction(*plan, pm).ok());
  for (const auto& [id, pos] : moves) EXPECT_EQ(pm.Find(id)->pos, pos);
  EXPECT_EQ(pm.Find(D)->pos, (Position{4, 2, 0}));
  EXPECT_EQ(pm.Find(E)->pos, (Position{5, 2, 1}));
  EXPECT_EQ(pm.Find(E)->version, 9u);  // versions unchanged
  EXPECT_EQ(pm.BucketLoad(1), 0u);
  EXPECT_EQ(pm.BucketLoad(2), 0u);
  EXPECT_TRUE(pm.CheckInvariants().ok());
}

TEST(Planner, ExpandStepMatrix) {
  const EvictionStep step{1, 2, {3, -1, 0}};
  std::vector<field::Elem> m(2 * 3 * 3, 5);
  ExpandStepMatrix(step, 3, m);
  const std::vector<field::Elem> expect{
      0, 0, 1,  // row 0: source slot 0 -> column 2
      0, 0, 0,  //
      0, 0, 0,  //
      1, 0, 0,  // row 3 = Z + 0: target slot 0 stays
      0, 0, 0,  //
      0, 0, 0};
  EXPECT_EQ(m, expect);
}

TEST(Planner, EmptyTree) {
  for (std::uint32_t H : {1u, 2u, 5u}) {
    const TreeGeometry geo{H, 4};
    PositionMap pm(geo, 8);
    for (std::uint64_t ne : {0ull, 1ull, 3ull}) {
      Result<EvictionPlan> plan = PlanEviction(geo, ne, pm);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      EXPECT_EQ(plan->leaf, geo.EvictionLeaf(ne));
      ASSERT_EQ(plan->steps.size(), H + 1);
      for (const EvictionStep& s : plan->steps) {
        EXPECT_EQ(s.rows, std::vector<std::int32_t>(4, -1));
      }
      EXPECT_EQ(plan->steps[H].target, TreeGeometry::Sibling(plan->leaf));
      EXPECT_TRUE(plan->moves.empty());
      EXPECT_TRUE(ApplyEviction(*plan, pm).ok());
    }
  }
}

// H = 1: the root's only children are the two leaves, step 1 fills the path
// leaf, step 2 the sibling leaf, and there is no copy.
TEST(Planner, HeightOne) {
  const TreeGeometry geo{1, 3};
  PositionMap pm(geo, 8);
  ASSERT_TRUE(pm.Place(0, {3, 0, 0}, 1).ok());
  ASSERT_TRUE(pm.Place(1, {2, 0, 1}, 1).ok());
  ASSERT_TRUE(pm.Place(2, {3, 0, 2}, 1).ok());
  ASSERT_TRUE(pm.Place(3, {3, 1, 0}, 1).ok());  // resident of leaf 3
  Result<EvictionPlan> plan = PlanEviction(geo, 0, pm);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->leaf, 2u);
  ASSERT_EQ(plan->steps.size(), 2u);
  EXPECT_EQ(plan->steps[0].source, 1u);
  EXPECT_EQ(plan->steps[0].target, 2u);
  EXPECT_EQ(plan->steps[0].rows, (std::vector<std::int32_t>{1, -1, -1}));
  EXPECT_EQ(plan->steps[1].source, 1u);
  EXPECT_EQ(plan->steps[1].target, 3u);
  EXPECT_EQ(plan->steps[1].rows, (std::vector<std::int32_t>{3, 0, 2}));
  const std::vector<std::pair<BlockId, Position>> moves{
      {1, {2, 1, 0}}, {0, {3, 1, 1}}, {2, {3, 1, 2}}};
  EXPECT_EQ(plan->moves, moves);
  ASSERT_TRUE(ApplyEviction(*plan, pm).ok());
  EXPECT_TRUE(pm.CheckInvariants().ok());
  EXPECT_EQ(PlanEviction(geo, 1, pm)->leaf, 3u);
}

TEST(Planner, OverflowNamesTheBucket) {
  // H = 2, Z = 2, eviction 0 (path 1, 2, 4): the sibling leaf 5 is full and a
  // root block bound for it arrives through bucket 2.
  const TreeGeometry geo{2, 2};
  PositionMap pm(geo, 8);
  ASSERT_TRUE(pm.Place(0, {5, 2, 0}, 1).ok());
  ASSERT_TRUE(pm.Place(1, {5, 2, 1}, 1).ok());
  ASSERT_TRUE(pm.Place(2, {5, 0, 1}, 1).ok());
  Result<EvictionPlan> plan = PlanEviction(geo, 0, pm);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Status::Code::kOverflow);
  const std::string& msg = plan.status().message();
  for (const char* part : {"eviction 0", "bucket 5", "level 2", "3 blocks", "Z = 2"}) {
    EXPECT_NE(msg.find(part), std::string::npos) << part << " missing from: " << msg;
  }

  // Same at an internal level: bucket 2 holds a resident, two root blocks enter it.
  PositionMap pm2(geo, 8);
  ASSERT_TRUE(pm2.Place(0, {4, 1, 0}, 1).ok());
  ASSERT_TRUE(pm2.Place(1, {4, 0, 0}, 1).ok());
  ASSERT_TRUE(pm2.Place(2, {5, 0, 1}, 1).ok());
  Result<EvictionPlan> plan2 = PlanEviction(geo, 4, pm2);  // 4 mod 2^2 = 0: same path
  ASSERT_FALSE(plan2.ok());
  EXPECT_EQ(plan2.status().code(), Status::Code::kOverflow);
  EXPECT_NE(plan2.status().message().find("bucket 2 at level 1"), std::string::npos)
      << plan2.status().message();
  EXPECT_NE(plan2.status().message().find("eviction 4"), std::string::npos);
}

TEST(Planner, NonEmptySiblingIsAFailedPrecondition) {
  // Eviction 0 of H = 3 goes 1, 2, 4, 8; s_1 = 3 must be empty but holds a block.
  const TreeGeometry geo{3, 4};
  PositionMap pm(geo, 8);
  ASSERT_TRUE(pm.Place(0, {12, 1, 2}, 1).ok());  // bucket 12 >> 2 = 3
  Result<EvictionPlan> plan = PlanEviction(geo, 0, pm);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("sibling bucket 3"), std::string::npos)
      << plan.status().message();
  // The sibling leaf may hold blocks: it is multiplied, not overwritten.
  PositionMap pm2(geo, 8);
  ASSERT_TRUE(pm2.Place(0, {9, 3, 2}, 1).ok());
  EXPECT_TRUE(PlanEviction(geo, 0, pm2).ok());
}

TEST(Planner, RejectsBadGeometry) {
  PositionMap pm(TreeGeometry{3, 4}, 8);
  EXPECT_EQ(PlanEviction(TreeGeometry{3, 5}, 0, pm).status().code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(PlanEviction(TreeGeometry{2, 4}, 0, pm).status().code(),
            Status::Code::kInvalidArgument);
  PositionMap flat(TreeGeometry{0, 4}, 8);
  EXPECT_EQ(PlanEviction(TreeGeometry{0, 4}, 0, flat).status().code(),
            Status::Code::kInvalidArgument);
}

TEST(Planner, ApplyEvictionIsAllOrNothing) {
  const TreeGeometry geo{2, 2};
  PositionMap pm(geo, 8);
  ASSERT_TRUE(pm.Place(0, {4, 0, 0}, 3).ok());
  ASSERT_TRUE(pm.Place(1, {4, 2, 0}, 4).ok());
  EvictionPlan bogus;
  bogus.eviction = 7;
  bogus.moves = {{0, {4, 1, 0}}, {0, {4, 2, 0}}};  // second move lands on block 1
  const Status st = ApplyEviction(bogus, pm);
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("eviction 7"), std::string::npos) << st.ToString();
  EXPECT_EQ(pm.Find(0)->pos, (Position{4, 0, 0}));
  EXPECT_EQ(pm.Find(0)->version, 3u);
  EXPECT_EQ(pm.Find(1)->pos, (Position{4, 2, 0}));
  EXPECT_TRUE(pm.CheckInvariants().ok());

  bogus.moves = {{5, {4, 1, 0}}};  // not in the tree
  EXPECT_EQ(ApplyEviction(bogus, pm).code(), Status::Code::kFailedPrecondition);
  EXPECT_TRUE(pm.CheckInvariants().ok());
}

// ---------------------------------------------------------------------------
// Determinism and eviction-number wrap on states reached by real workloads.

TEST(Planner, DeterministicAndWraps) {
  auto rng = testing::SeededRng();
  for (std::uint32_t H : {1u, 3u, 5u}) {
    SCOPED_TRACE("H=" + std::to_string(H));
    const std::uint32_t A = 3;
    const std::uint64_t N = std::uint64_t{A} << (H - 1);
    const TreeGeometry geo{H, MinSafeBucketSize(A, H, 80, N)};
    Driver d(geo, A, N, /*with_model=*/false);
    std::uniform_int_distribution<BlockId> any(0, N - 1);
    for (int i = 0; i < 2000; ++i) {
      const Status st = d.Access(any(rng), rng);
      ASSERT_TRUE(st.ok()) << st.ToString();
      if (i % 97 != 0) continue;
      // Snapshot now: a copy of the map built in the reverse order (so its
      // hash tables differ) must plan identically, and so must ne + m 2^H.
      const PositionMap& pm = d.pm();
      PositionMap copy(geo, N);
      for (BlockId id = N; id-- > 0;) {
        if (const PositionEntry* e = pm.Find(id)) {
          ASSERT_TRUE(copy.Place(id, e->pos, e->version).ok());
        }
      }
      const std::uint64_t ne = d.evictions();
      Result<EvictionPlan> p1 = PlanEviction(geo, ne, pm);
      Result<EvictionPlan> p2 = PlanEviction(geo, ne, pm);
      Result<EvictionPlan> p3 = PlanEviction(geo, ne, copy);
      const std::uint64_t wrapped = ne + (geo.num_leaves() << (1 + i % 5));
      Result<EvictionPlan> p4 = PlanEviction(geo, wrapped, pm);
      ASSERT_TRUE(p1.ok() && p2.ok() && p3.ok() && p4.ok()) << p1.status().ToString();
      ExpectSamePlan(*p1, *p2);
      ExpectSamePlan(*p1, *p3);
      ExpectSamePlan(*p1, *p4);
      EXPECT_EQ(p4->eviction, wrapped);
      EXPECT_EQ(p1->eviction, ne);
    }
  }
  // The wrap at the 64-bit boundary of the counter.
  const TreeGeometry geo{4, 4};
  PositionMap pm(geo, 4);
  ASSERT_TRUE(pm.Place(0, {geo.EvictionLeaf(~0ull), 0, 0}, 1).ok());
  Result<EvictionPlan> plan = PlanEviction(geo, ~0ull, pm);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->leaf, geo.EvictionLeaf(15));
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].second, (Position{plan->leaf, 4, 0}));
}

// ---------------------------------------------------------------------------
// (a) Plaintext simulation: the plan, executed by the server model, leaves
// every live block's latest value exactly where the position map says.

struct ModelCase {
  std::uint32_t H;
  std::uint32_t A;
  int accesses;
};

TEST(PlannerModel, ServersHoldEveryBlockWhereTheMapSays) {
  auto rng = testing::SeededRng();
  for (const ModelCase c : {ModelCase{1, 2, 3000}, ModelCase{1, 5, 3000}, ModelCase{2, 3, 4000},
                            ModelCase{3, 2, 4000}, ModelCase{3, 4, 5000}, ModelCase{6, 3, 8000},
                            ModelCase{6, 6, 6000}}) {
    const std::uint64_t N = std::uint64_t{c.A} << (c.H - 1);
    const std::uint32_t Z = MinSafeBucketSize(c.A, c.H, 80, N);
    SCOPED_TRACE("H=" + std::to_string(c.H) + " A=" + std::to_string(c.A) + " Z=" +
                 std::to_string(Z) + " N=" + std::to_string(N));
    ASSERT_GE(Z, c.A);
    const TreeGeometry geo{c.H, Z};
    Driver d(geo, c.A, N, /*with_model=*/true);
    // Ids come from [0, N) (the capacity Z is computed for): early accesses
    // mostly write blocks not yet in the tree, later ones rewrite live blocks.
    std::uniform_int_distribution<BlockId> any(0, N - 1);
    for (int i = 0; i < c.accesses; ++i) {
      const Status st = d.Access(any(rng), rng);
      ASSERT_TRUE(st.ok()) << "access " << i << ": " << st.ToString();
      ASSERT_NO_FATAL_FAILURE(d.CheckModel()) << "access " << i;
      if (i % 16 == 0 || i + 1 == c.accesses) {
        const Status inv = d.pm().CheckInvariants();
        ASSERT_TRUE(inv.ok()) << inv.ToString();
      }
    }
    EXPECT_EQ(d.pm().live_blocks(), N);  // every block was written at least once by now
    EXPECT_EQ(d.stats().max_load[0], c.A);
    // <= only: in these small trees Z may equal the most a bucket can ever
    // receive (e.g. H = 2, A = 3: level 1 gets at most 6 = Z blocks).
    EXPECT_LE(d.stats().MaxInternal(), Z);
    std::printf("[ model    ] H=%u A=%u Z=%u N=%llu: %llu evictions, max load per level: %s\n",
                c.H, c.A, Z, static_cast<unsigned long long>(N),
                static_cast<unsigned long long>(d.evictions()), d.stats().ToString().c_str());
  }
}

// With Z = A the plan overflows quickly; up to that point the model proves
// every block was placed correctly, and the failed plan changes nothing.
TEST(PlannerModel, UnsafeBucketSizeOverflowsLoudlyNeverSilently) {
  auto rng = testing::SeededRng();
  for (const auto& [H, A] : {std::pair{5u, 4u}, std::pair{6u, 8u}}) {
    const std::uint64_t N = std::uint64_t{A} << (H - 1);
    const TreeGeometry geo{H, A};
    SCOPED_TRACE("H=" + std::to_string(H) + " Z=A=" + std::to_string(A));
    Driver d(geo, A, N, /*with_model=*/true);
    std::vector<BlockId> order(N);
    for (BlockId id = 0; id < N; ++id) order[id] = id;
    std::shuffle(order.begin(), order.end(), rng);
    std::uniform_int_distribution<BlockId> any(0, N - 1);
    Status st;
    int i = 0;
    for (; i < 100000 && st.ok(); ++i) {
      st = d.Access(i < static_cast<int>(N) ? order[i] : any(rng), rng);
      if (st.ok()) {
        ASSERT_NO_FATAL_FAILURE(d.CheckModel()) << "access " << i;
      }
    }
    ASSERT_EQ(st.code(), Status::Code::kOverflow) << st.ToString();
    EXPECT_NE(st.message().find("bucket "), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("Z = " + std::to_string(A)), std::string::npos) << st.message();
    // The failed eviction changed nothing: the map still agrees with the servers.
    ASSERT_NO_FATAL_FAILURE(d.CheckModel());
    EXPECT_TRUE(d.pm().CheckInvariants().ok());
    std::printf("[ overflow ] H=%u Z=A=%u: overflow at access %d (eviction %llu): %s\n", H, A, i,
                static_cast<unsigned long long>(d.evictions()), st.message().c_str());
  }
}

// ---------------------------------------------------------------------------
// (b) Reduced-scale overflow simulation: N = A 2^(H-1) blocks written, then
// many uniformly random accesses. With Z = MinSafeBucketSize(A, H, 80, N)
// nothing may overflow; (d) the maximum load per level is printed and every
// internal bucket stays below Z.

struct SimCase {
  std::uint32_t H;
  std::uint32_t A;
  int accesses;
};

TEST(EvictionSimulation, ComputedBucketSizeNeverOverflows) {
  auto rng = testing::SeededRng();
  const auto start = std::chrono::steady_clock::now();
  for (const SimCase c : {SimCase{7, 4, 2000000}, SimCase{6, 6, 2000000}, SimCase{5, 8, 2000000}}) {
    const std::uint64_t N = std::uint64_t{c.A} << (c.H - 1);
    const std::uint32_t Z = MinSafeBucketSize(c.A, c.H, 80, N);
    SCOPED_TRACE("H=" + std::to_string(c.H) + " A=" + std::to_string(c.A) + " Z=" +
                 std::to_string(Z));
    ASSERT_GT(Z, c.A);
    const TreeGeometry geo{c.H, Z};
    Driver d(geo, c.A, N, /*with_model=*/false);
    std::vector<BlockId> order(N);
    for (BlockId id = 0; id < N; ++id) order[id] = id;
    std::shuffle(order.begin(), order.end(), rng);
    std::uniform_int_distribution<BlockId> any(0, N - 1);
    const int total = static_cast<int>(N) + c.accesses;
    for (int i = 0; i < total; ++i) {
      const Status st = d.Access(i < static_cast<int>(N) ? order[i] : any(rng), rng);
      ASSERT_TRUE(st.ok()) << "access " << i << ": " << st.ToString();
      if (i % 20000 == 0) {
        const Status inv = d.pm().CheckInvariants();
        ASSERT_TRUE(inv.ok()) << inv.ToString();
      }
    }
    const Status inv = d.pm().CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv.ToString();
    EXPECT_EQ(d.pm().live_blocks(), N);
    EXPECT_LT(d.stats().MaxInternal(), Z);
    std::printf(
        "[ sim      ] H=%u A=%u N=%llu Z=%u: %d accesses, %llu evictions, 0 overflows; "
        "max load per level (root..leaf): %s\n",
        c.H, c.A, static_cast<unsigned long long>(N), Z, total,
        static_cast<unsigned long long>(d.evictions()), d.stats().ToString().c_str());
  }
  std::printf("[ sim      ] %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace
}  // namespace s3oram

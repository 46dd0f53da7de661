// The eviction planner (client side of Subroutine 3): for the ne-th eviction it
// computes the 0/1 matrices the servers multiply with, and the positions every
// moved block will have once the eviction commits. It is pure: the position map
// is read, never changed (ApplyEviction does that after the servers commit).
//
// Server semantics the plan is built for. Let u_0..u_H be the buckets on the
// eviction path (u_0 the root) and s_k the sibling of u_k. For k = 1..H, in order:
//   1. if k < H: s_k := copy of u_{k-1}           (s_k is empty; see below)
//   2. u_k := [u_{k-1}; u_k] * M_k                 (2Z x Z, degree reduced by SMP)
// and then, for the sibling leaf,
//   3. s_H := [u_{H-1}; s_H] * M'_H
// where u_{k-1} means its content after step k-1 wrote it. Column j of a matrix
// has a single 1 in the row of the slot whose block moves to (or stays in) slot
// j of the target, or no 1 (the slot becomes zero). After the eviction every
// non-leaf bucket of the path is logically empty. s_k (k < H) is empty before
// step 1 because its parent u_{k-1} was last evicted 2^(k-1) evictions ago
// towards s_k, emptying it, and nothing reaches s_k except through its parent.
//
// Slots are chosen deterministically (lowest free slot), so re-planning the
// same eviction after a crash yields the same plan.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/field.h"
#include "oramcore/tree/geometry.h"
#include "oramcore/tree/position_map.h"

namespace s3oram {

struct EvictionStep {
  BucketId source = 0;  // u_{k-1}
  BucketId target = 0;  // u_k, or s_H for the last step
  // rows[j] in [0, 2Z): the single 1 of column j (rows < Z: source slot rows[j];
  // rows >= Z: target slot rows[j] - Z). -1: column j is all zero.
  std::vector<std::int32_t> rows;
};

struct EvictionPlan {
  std::uint64_t eviction = 0;  // ne
  LeafId leaf = 0;             // the eviction path
  std::vector<EvictionStep> steps;  // H + 1: u_1..u_H, then s_H
  std::vector<std::pair<BlockId, Position>> moves;  // final position of every moved block
};

// Fails with Status::Overflow (naming the bucket and level) if some target
// bucket has no free slot for a block that must enter it; nothing is sent then.
Result<EvictionPlan> PlanEviction(const TreeGeometry& geo, std::uint64_t ne,
                                  const PositionMap& pm);

// Writes the dense 2Z x Z 0/1 matrix of a step, row-major.
void ExpandStepMatrix(const EvictionStep& step, std::uint32_t Z, std::span<field::Elem> out);

// Applies plan.moves to pm (versions unchanged).
Status ApplyEviction(const EvictionPlan& plan, PositionMap& pm);

}  // namespace s3oram

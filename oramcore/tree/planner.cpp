#include "oramcore/tree/planner.h"

#include <algorithm>
#include <limits>
#include <string>

namespace s3oram {

namespace {

// Fills `step` (whose rows are all -1) and `content` (the target's occupants
// by slot after the step) for moving the `incoming` source slots into
// step.target: residents keep their slots, incoming blocks take the lowest
// free slots in source-slot order. Fails with Overflow if they do not all fit.
Status FillTarget(const TreeGeometry& geo, std::uint64_t ne, const PositionMap& pm,
                  std::span<const BlockId> source, std::span<const std::uint32_t> incoming,
                  EvictionStep& step, std::vector<BlockId>& content,
                  std::vector<std::pair<BlockId, Position>>* moves) {
  const std::uint32_t Z = geo.bucket_size;
  std::fill(content.begin(), content.end(), kNoBlock);
  std::uint32_t residents = 0;
  if (std::span<const BlockId> slots = pm.BucketSlots(step.target); !slots.empty()) {
    for (std::uint32_t j = 0; j < Z; ++j) {
      if (slots[j] == kNoBlock) continue;
      content[j] = slots[j];
      step.rows[j] = static_cast<std::int32_t>(Z + j);
      ++residents;
    }
  }
  if (residents + incoming.size() > Z) {
    const std::uint32_t level = TreeGeometry::LevelOf(step.target);
    return Status::Overflow(
        "eviction " + std::to_string(ne) + " (path to leaf " +
        std::to_string(geo.EvictionLeaf(ne)) + "): bucket " + std::to_string(step.target) +
        " at level " + std::to_string(level) + " would hold " +
        std::to_string(residents + incoming.size()) + " blocks (" + std::to_string(residents) +
        " resident + " + std::to_string(incoming.size()) + " arriving) but Z = " +
        std::to_string(Z) +
        "; the bucket size is too small for the eviction rate (see MinSafeBucketSize)");
  }
  std::uint32_t free_slot = 0;
  for (const std::uint32_t i : incoming) {
    while (content[free_slot] != kNoBlock) ++free_slot;  // exists: checked above
    const BlockId id = source[i];
    content[free_slot] = id;
    step.rows[free_slot] = static_cast<std::int32_t>(i);
    if (moves != nullptr) {
      moves->emplace_back(id, Position{pm.Find(id)->pos.leaf, TreeGeometry::LevelOf(step.target),
                                       free_slot});
    }
  }
  return Status::Ok();
}

}  // namespace

Result<EvictionPlan> PlanEviction(const TreeGeometry& geo, std::uint64_t ne,
                                  const PositionMap& pm) {
  const std::uint32_t H = geo.height;
  const std::uint32_t Z = geo.bucket_size;
  if (H == 0 || H >= 63 || Z == 0) {
    return Status::InvalidArgument("eviction needs 1 <= H < 63 and Z >= 1 (H = " +
                                   std::to_string(H) + ", Z = " + std::to_string(Z) + ")");
  }
  if (pm.geometry().height != H || pm.geometry().bucket_size != Z) {
    return Status::InvalidArgument("position map geometry (H = " +
                                   std::to_string(pm.geometry().height) + ", Z = " +
                                   std::to_string(pm.geometry().bucket_size) +
                                   ") differs from the eviction's (H = " + std::to_string(H) +
                                   ", Z = " + std::to_string(Z) + ")");
  }
  if (Z > static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max() / 2)) {
    return Status::InvalidArgument("Z = " + std::to_string(Z) + " is too large for a step matrix");
  }

  EvictionPlan plan;
  plan.eviction = ne;
  plan.leaf = geo.EvictionLeaf(ne);
  plan.steps.reserve(H + 1);

  // `source` is the logical content of u_{k-1} after step k-1 has written it
  // (block ids by slot); initially the root's live blocks. `target` becomes u_k.
  std::vector<BlockId> source(Z, kNoBlock);
  std::vector<BlockId> target(Z, kNoBlock);
  if (std::span<const BlockId> root = pm.BucketSlots(1); !root.empty()) {
    std::copy(root.begin(), root.end(), source.begin());
  }
  std::vector<std::uint32_t> down;     // source slots whose block enters u_k
  std::vector<std::uint32_t> across;   // source slots whose block belongs below s_k
  down.reserve(Z);
  across.reserve(Z);

  for (std::uint32_t k = 1; k <= H; ++k) {
    const BucketId u_prev = plan.leaf >> (H - k + 1);
    const BucketId u = plan.leaf >> (H - k);
    const BucketId s = TreeGeometry::Sibling(u);
    if (k < H && pm.BucketLoad(s) != 0) {
      // The copy u_{k-1} -> s_k would destroy s_k's blocks. With evictions in
      // reverse-lexicographic order from an empty tree this cannot happen
      // (planner.h), so the map or the eviction counter is inconsistent.
      return Status::FailedPrecondition(
          "eviction " + std::to_string(ne) + ": sibling bucket " + std::to_string(s) +
          " at level " + std::to_string(k) + " holds " + std::to_string(pm.BucketLoad(s)) +
          " live blocks but must be empty before it is overwritten by a copy of bucket " +
          std::to_string(u_prev) + " (eviction counter out of step with the position map?)");
    }

    // Every block of u_{k-1} lies on a path through u_{k-1}, so it continues
    // either into u_k or into its sibling s_k.
    down.clear();
    across.clear();
    for (std::uint32_t i = 0; i < Z; ++i) {
      if (source[i] == kNoBlock) continue;
      const LeafId leaf = pm.Find(source[i])->pos.leaf;
      (geo.BucketOnPath(leaf, k) == u ? down : across).push_back(i);
    }

    EvictionStep step{u_prev, u, std::vector<std::int32_t>(Z, -1)};
    // Blocks entering u_k reach their final position only if u_k is the leaf;
    // otherwise step k + 1 moves them on and records them then.
    S3ORAM_RETURN_IF_ERROR(
        FillTarget(geo, ne, pm, source, down, step, target, k == H ? &plan.moves : nullptr));
    plan.steps.push_back(std::move(step));

    if (k < H) {
      // The copy puts the source's slot i into slot i of s_k: final, since s_k
      // is not on this path and nothing else writes it in this eviction.
      for (const std::uint32_t i : across) {
        plan.moves.emplace_back(source[i], Position{pm.Find(source[i])->pos.leaf, k, i});
      }
      source.swap(target);
    }
  }

  // Step H + 1: u_{H-1} (still `source`: step H did not change it) into the
  // sibling leaf s_H, whose residents stay. `across` holds the blocks bound for it.
  EvictionStep last{plan.leaf >> 1, TreeGeometry::Sibling(plan.leaf),
                    std::vector<std::int32_t>(Z, -1)};
  S3ORAM_RETURN_IF_ERROR(FillTarget(geo, ne, pm, source, across, last, target, &plan.moves));
  plan.steps.push_back(std::move(last));
  return plan;
}

void ExpandStepMatrix(const EvictionStep& step, std::uint32_t Z, std::span<field::Elem> out) {
  // Precondition: out.size() >= 2Z * Z and step.rows.size() == Z. Nothing is
  // written outside `out` even if a caller breaks it.
  const std::size_t cells = std::size_t{2} * Z * Z;
  std::fill(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(std::min(cells, out.size())),
            field::Elem{0});
  const std::size_t columns = std::min<std::size_t>(step.rows.size(), Z);
  for (std::size_t j = 0; j < columns; ++j) {
    const std::int32_t r = step.rows[j];
    if (r < 0) continue;
    const std::size_t cell = static_cast<std::size_t>(r) * Z + j;
    if (static_cast<std::uint32_t>(r) < 2 * Z && cell < out.size()) out[cell] = 1;
  }
}

Status ApplyEviction(const EvictionPlan& plan, PositionMap& pm) {
  // All moved blocks leave their slots first, so the result does not depend on
  // the order of the moves. Nothing changes unless every move succeeds.
  std::vector<std::pair<BlockId, PositionEntry>> before;
  before.reserve(plan.moves.size());
  for (const auto& [id, pos] : plan.moves) {
    const PositionEntry* e = pm.Find(id);
    if (e == nullptr) {
      return Status::FailedPrecondition("eviction " + std::to_string(plan.eviction) +
                                        " moves block " + std::to_string(id) +
                                        " which is not in the tree");
    }
    before.emplace_back(id, *e);
  }
  for (const auto& [id, entry] : before) pm.Remove(id);
  for (std::size_t i = 0; i < plan.moves.size(); ++i) {
    const auto& [id, pos] = plan.moves[i];
    Status st = pm.Place(id, pos, before[i].second.version);
    if (!st.ok()) {
      // Undo: the original slots are free again once the moved blocks leave.
      for (const auto& [rid, entry] : before) pm.Remove(rid);
      for (const auto& [rid, entry] : before) {
        [[maybe_unused]] Status restored = pm.Place(rid, entry.pos, entry.version);
      }
      return st.WithContext("applying eviction " + std::to_string(plan.eviction));
    }
  }
  return Status::Ok();
}

}  // namespace s3oram

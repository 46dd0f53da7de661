// The client's position map: where each live block sits in the tree, and the
// inverse (which block occupies each slot) that the eviction planner needs.
//
// Invariants: a block id maps to at most one (leaf, level, slot); the bucket at
// (leaf, level) lies on the path to leaf; no two blocks share a slot. Slots not
// occupied by a live block hold garbage (stale copies, zeros) on the servers.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/tree/geometry.h"

namespace s3oram {

using BlockId = std::uint64_t;
inline constexpr BlockId kNoBlock = ~BlockId{0};

struct Position {
  LeafId leaf = 0;  // 0 means "not in the tree"
  std::uint32_t level = 0;
  std::uint32_t slot = 0;
  bool operator==(const Position&) const = default;
};

struct PositionEntry {
  Position pos;
  std::uint64_t version = 0;  // bumped on every access that rewrites the block to the root (reads too: each rewrite is a fresh sharing)
};

class PositionMap {
 public:
  PositionMap(TreeGeometry geometry, std::uint64_t capacity_blocks);

  const TreeGeometry& geometry() const { return geo_; }
  std::uint64_t capacity() const { return entries_.size(); }
  std::uint64_t live_blocks() const { return live_; }

  // nullptr if id is out of range or not in the tree.
  const PositionEntry* Find(BlockId id) const;

  // Puts id at pos with the given version, freeing its previous slot if any.
  // Fails (changing nothing) if id >= capacity, pos is outside the tree or the
  // slot is held by another block.
  Status Place(BlockId id, Position pos, std::uint64_t version);
  void Remove(BlockId id);

  BlockId Occupant(BucketId bucket, std::uint32_t slot) const;
  // Z entries (kNoBlock for free slots); empty span if the bucket holds no block.
  std::span<const BlockId> BucketSlots(BucketId bucket) const;
  std::uint32_t BucketLoad(BucketId bucket) const;

  // Checks every invariant above; used by tests and fsck.
  Status CheckInvariants() const;

 private:
  TreeGeometry geo_;
  std::vector<PositionEntry> entries_;
  // Only buckets holding at least one block have an entry, so memory follows
  // the live blocks, not the tree. Each vector holds the Z slot occupants
  // followed by the bucket's load (see LoadIndex in position_map.cpp).
  std::unordered_map<BucketId, std::vector<BlockId>> buckets_;
  // Nodes of buckets that became empty, kept (cleared, bounded in number) so
  // that the buckets an access or eviction empties and fills again reuse them
  // instead of allocating: steady-state operation does not allocate.
  std::vector<std::unordered_map<BucketId, std::vector<BlockId>>::node_type> spare_;
  std::uint64_t live_ = 0;
};

}  // namespace s3oram

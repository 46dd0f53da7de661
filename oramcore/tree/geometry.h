// Geometry of the S3ORAM tree: a complete binary tree of height H whose buckets
// are numbered in heap order 1 .. 2^(H+1)-1 (root 1, children of b are 2b and
// 2b+1), so leaves are [2^H, 2^(H+1)) and a leaf number doubles as a path id.
// Level 0 is the root, level H the leaves. Every bucket has Z slots.
//
// A position on a path is (level, slot), flattened as level * Z + slot when a
// select vector or matrix needs one index. All indices here are 0-based.
#pragma once

#include <cstdint>

namespace s3oram {

using BucketId = std::uint64_t;  // heap index, >= 1
using LeafId = std::uint64_t;    // in [2^H, 2^(H+1))

struct TreeGeometry {
  std::uint32_t height = 0;       // H
  std::uint32_t bucket_size = 0;  // Z

  std::uint64_t num_buckets() const { return (std::uint64_t{2} << height) - 1; }
  std::uint64_t num_leaves() const { return std::uint64_t{1} << height; }
  LeafId first_leaf() const { return std::uint64_t{1} << height; }
  bool is_leaf(LeafId leaf) const { return leaf >= first_leaf() && leaf < (first_leaf() << 1); }
  std::uint32_t levels() const { return height + 1; }
  std::uint64_t path_slots() const { return std::uint64_t{bucket_size} * levels(); }
  std::uint64_t total_slots() const { return num_buckets() * bucket_size; }

  // Bucket at `level` on the path to `leaf`.
  BucketId BucketOnPath(LeafId leaf, std::uint32_t level) const {
    return leaf >> (height - level);
  }
  static std::uint32_t LevelOf(BucketId b) {
    return 63u - static_cast<std::uint32_t>(__builtin_clzll(b));
  }
  static BucketId Sibling(BucketId b) { return b ^ 1u; }

  // Leaf of the ne-th eviction path: reverse-lexicographic order (Gentry et al.,
  // S3ORAM eq. 6). The edge taken at level k (from the root) is bit k of
  // (ne mod 2^H), so consecutive evictions alternate at the root and every
  // bucket of level d lies on exactly one of any 2^d consecutive eviction paths.
  LeafId EvictionLeaf(std::uint64_t ne) const {
    std::uint64_t v = ne & (num_leaves() - 1);
    std::uint64_t r = 0;
    for (std::uint32_t k = 0; k < height; ++k) r |= ((v >> k) & 1u) << (height - 1 - k);
    return first_leaf() | r;
  }
};

}  // namespace s3oram

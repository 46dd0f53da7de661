// Which buckets a run of evictions rewrites: what a server that missed them
// lacks (a catch-up, oramcore/protocol/rebuild.h, sends it only these).
//
// Eviction e rewrites the buckets of levels 1..H on the path to
// TreeGeometry::EvictionLeaf(e) and their siblings (the server's shadow
// list, serverd/handle_eviction.cpp), and the root changes with every
// access. The footprint is public: it depends on eviction numbers only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "oramcore/tree/geometry.h"

namespace s3oram {

// Flags indexed by bucket (0 unused, 1..num_buckets): true for the root and
// every bucket evictions from .. to - 1 rewrite. Evictions go round the
// leaves in reverse-lexicographic order, so 2^H consecutive ones cover
// every bucket: beyond that the answer is the whole tree.
inline std::vector<bool> BucketsRewrittenBy(const TreeGeometry& geo, std::uint64_t from,
                                            std::uint64_t to) {
  std::vector<bool> changed(geo.num_buckets() + 1, false);
  changed[1] = true;
  const std::uint64_t n = to > from ? std::min(to - from, geo.num_leaves()) : 0;
  for (std::uint64_t e = from; e < from + n; ++e) {
    const LeafId leaf = geo.EvictionLeaf(e);
    for (std::uint32_t k = 1; k <= geo.height; ++k) {
      const BucketId b = geo.BucketOnPath(leaf, k);
      changed[b] = true;
      changed[TreeGeometry::Sibling(b)] = true;
    }
  }
  return changed;
}

}  // namespace s3oram

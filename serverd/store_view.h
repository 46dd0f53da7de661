// StoreView: what every view of a ShareStore (share_store.h) has, the store it
// views and the shape of its tree. The views split the store's operations by
// concern so that each handler names only those it needs:
//   LiveTree         store_tree.h        the buckets accesses read and write
//   EvictionShadow   store_shadow.h      an eviction's root snapshot, shadow, commit
//   StoreScrub       store_scrub.h       slot checks of SCRUB, PARITY, SLOT_SHARE
//   StoreRebuild     store_rebuild.h     the store as a rebuild's target
//   AgeFill          store_age_fill.h    AGE_FILL (benchmarks only)
//   StoreInspection  store_inspection.h  the share file's size and layout
//
// Plain classes, not abstract interfaces: a view is a non-virtual class that
// lives inside its store and holds a reference to it (ShareStore::tree() and
// the others return it by reference; it cannot be copied, so it never
// outlives the store). A call through a view costs one pointer load more than
// a call on the store did, and no indirect call or allocation, so the hot
// paths (BucketForRead, VerifyBuckets, PutShadowBucket, WriteSlot) cost what
// they did. There is one implementation (tests use real stores in temporary
// directories), so virtual interfaces would add indirect calls for nothing.
#pragma once

#include <cstdint>

#include "oramcore/math/field.h"

namespace s3oram::serverd {

using field::Elem;

class ShareStore;

class StoreView {
 public:
  StoreView(const StoreView&) = delete;
  StoreView& operator=(const StoreView&) = delete;

  // Elements per slot (m), per bucket (Z * m), and the number of buckets
  // N = 2^(H+1)-1 of the tree (numbered 1..N).
  std::uint64_t slot_elems() const;
  std::uint64_t bucket_elems() const;
  std::uint64_t num_buckets() const;

 protected:
  explicit StoreView(ShareStore& store) : s_(store) {}
  ~StoreView() = default;
  ShareStore& s_;
};

}  // namespace s3oram::serverd

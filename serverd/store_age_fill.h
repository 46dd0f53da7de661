// AgeFill: benchmarks only (wire.h AGE_FILL). Writes buckets of a new
// ShareStore's (share_store.h) tree with a sharing of empty slots, so that a
// benchmark can start from a tree whose every bucket was written, as in a
// filesystem in use for months, instead of a sparse file of holes.
//
// Guarantees: FillUnusedBuckets refuses a tree that has been used (an access
// or eviction applied, a shadow, a root snapshot), whose slots it would
// overwrite, and a store being rebuilt or one that met an fdatasync failure;
// the buckets and their digests are durable before it returns OK.
#pragma once

#include <cstdint>
#include <span>

#include "oramcore/base/status.h"
#include "serverd/store_view.h"

namespace s3oram::serverd {

class AgeFill : public StoreView {
 public:
  // Overwrites whole buckets from `first` on with `data` and their digests,
  // durably. FailedPrecondition unless the tree has never been used (no access
  // or eviction applied, no shadow, no root snapshot): it would overwrite live
  // slots.
  Status FillUnusedBuckets(std::uint64_t first, std::span<const Elem> data);
  // OK if the tree has never been used (FillUnusedBuckets' condition), else
  // FailedPrecondition saying why.
  Status CheckUnused() const;

 private:
  friend class ShareStore;
  explicit AgeFill(ShareStore& store) : StoreView(store) {}
};

}  // namespace s3oram::serverd

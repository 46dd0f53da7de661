// StoreScrub: the checks of a ShareStore (share_store.h) that SCRUB, PARITY
// and SLOT_SHARE run: every slot of a range of the live tree, or of the root
// snapshot a pending eviction reads (wire::kRootSnapshotBucket), read and
// checked against the digest stored with it; for PARITY also each good
// slot's digest under the client's public key; for SLOT_SHARE one slot of
// the root snapshot.
//
// Guarantees: read-only, nothing here changes the store. Finding a damaged
// slot is not an error: it is flagged for the caller to report, and a
// damaged slot never gets a public digest. These run beside a mount but not
// while a PREPARE computes, and need no lease.
#pragma once

#include <cstdint>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/slot_digest.h"
#include "serverd/store_view.h"

namespace s3oram::serverd {

class StoreScrub : public StoreView {
 public:
  // Reads buckets [first, first + count) and checks every slot against
  // its digest (a hole bucket: its digests must be zero). Returns count * Z
  // flags, bucket-major, 1 for each damaged slot; finding damage is not an
  // error (the caller reports it).
  Result<std::vector<std::uint8_t>> Scrub(std::uint64_t first, std::uint64_t count) const;
  // The same, and for each slot its digest under a public key (wire.h
  // PARITY): out_digests gets count * Z digests, bucket-major (zero for a
  // hole bucket, which holds zeros).
  Result<std::vector<std::uint8_t>> Scrub(std::uint64_t first, std::uint64_t count,
                                          const digest::DigestKey& public_key,
                                          std::vector<digest::SlotDigest>* out_digests) const;

  // True when a complete root snapshot is the input of the next eviction
  // (applied_evictions): the bytes SCRUB, PARITY and SLOT_SHARE cover as
  // bucket 0 (wire::kRootSnapshotBucket).
  bool HoldsPendingRootSnapshot() const;
  // Scrub's check of that snapshot: Z flags (1 = slot does not match its
  // digest) and, if out_digests, the public digests of the slots that do.
  // FailedPrecondition without a pending snapshot.
  Result<std::vector<std::uint8_t>> ScrubRootSnapshot(
      const digest::DigestKey* public_key, std::vector<digest::SlotDigest>* out_digests) const;
  // Slot `slot` of that snapshot, checked against its digest.
  Result<std::vector<Elem>> RootSnapshotSlot(std::uint32_t slot) const;

 private:
  friend class ShareStore;
  explicit StoreScrub(ShareStore& store) : StoreView(store) {}
};

}  // namespace s3oram::serverd

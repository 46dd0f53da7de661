// LiveTree: the live tree of a ShareStore (share_store.h), as accesses and
// the readers of committed buckets see it: bucket reads (the mapping, or one
// pread), their checks against the slot digests stored beside them, the root
// write of an access (WriteSlot), the header's counters (UpdateMeta) and which
// buckets were never written (Holes).
//
// Guarantees: bucket b always means its live content; where it lies in the
// share file changes only at EvictionShadow::Commit. WriteSlot and UpdateMeta
// are durable (fdatasync) before they return OK, write a slot only together
// with its digest, and are refused by a store being rebuilt or one that met
// an fdatasync failure. Reads are not checked by themselves: callers check
// what they read with VerifyBuckets (or Digests, by linearity) before using
// it, so damage is reported as Damaged instead of entering an answer.
//
// Threads: the reads may run beside each other; callers serialise
// WriteSlot and UpdateMeta. While an eviction's PREPARE runs on its own
// thread (EvictionShadow), another thread may read any bucket here and write
// root slots (WriteSlot): see ShareStore.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/slot_digest.h"
#include "serverd/server_meta.h"
#include "serverd/store_view.h"

namespace s3oram::serverd {

class LiveTree : public StoreView {
 public:
  // Read-only view of bucket b (1-based), bucket_elems() elements. Valid until
  // the store is destroyed; contents change only through WriteSlot and Commit.
  const Elem* Bucket(std::uint64_t b) const;
  // Copies bucket b into out (bucket_elems() elements) with one large pread.
  // First touches of a mapping cost a page fault per 4 KiB (60-80 MB/s on the
  // VMs measured, on the sparse regions of a fresh store) while a pread of the
  // same range runs at 0.8-1.3 GB/s; on resident pages the mapping avoids the
  // copy. BucketForRead picks between the two.
  Status ReadBucket(std::uint64_t b, std::span<Elem> out) const;
  // Bucket b for reading: the mapping itself if every page of it is in the page
  // cache (faults there are cheap minor faults), else a ReadBucket copy in
  // `scratch` (bucket_elems() elements). Either way valid until the next call
  // that uses the same scratch, or the next mutation of the bucket.
  Result<const Elem*> BucketForRead(std::uint64_t b, std::span<Elem> scratch) const;
  // Copies buckets [first, first + count) into out (count * bucket_elems()
  // elements) with one large pread (holes read as zeros). Not verified: see
  // VerifyBuckets.
  Status ReadBuckets(std::uint64_t first, std::uint64_t count, std::span<Elem> out) const;

  // Checks buckets read from this store (data: whole buckets from `first` on)
  // slot by slot against their stored digests. Damaged names this server, the
  // first bad bucket and slot.
  Status VerifyBuckets(std::uint64_t first, std::span<const Elem> data) const;
  // Bucket b's stored slot digests (Z of them), for checks by linearity: the
  // digest of sum_q a_q * slot_q must be digest::Combine(a, digests).
  std::span<const digest::SlotDigest> Digests(std::uint64_t b) const;
  const digest::DigestKey& digest_key() const;
  // The Damaged status for slot `slot` of bucket b: names the server, the
  // file, the bucket and slot, and what repairs it. `what` says how it was
  // found.
  Status DamagedSlot(std::uint64_t b, std::uint64_t slot, const std::string& what) const;
  // For each bucket of [first, first + count): true if it lies entirely in a
  // file hole (never written: reads as zeros). Conservative: where the
  // filesystem cannot tell (no SEEK_DATA), every bucket counts as written.
  Result<std::vector<bool>> Holes(std::uint64_t first, std::uint64_t count) const;

  // Overwrites one slot of a bucket and records seq/epoch in the header; one
  // fdatasync makes both durable before it returns OK.
  // `while_syncing`, if given, runs once the slot and header are written (it
  // sees the new slot through every read of this store) while the fdatasync is
  // in flight on another thread; the result is OK only if both succeeded.
  // RETRIEVE_WRITE_ROOT answers its retrieval there, so the disk flush and the
  // path kernel overlap.
  Status WriteSlot(std::uint64_t bucket, std::uint32_t slot, std::span<const Elem> data,
                   std::uint64_t seq, std::uint64_t epoch,
                   const std::function<Status()>& while_syncing = {});
  // Writes `meta` to the header, durably. It may not change the shape or the
  // evictions applied (only Commit moves those, with the bucket map).
  Status UpdateMeta(const ServerMeta& meta);

 private:
  friend class ShareStore;
  explicit LiveTree(ShareStore& store) : StoreView(store) {}
};

}  // namespace s3oram::serverd

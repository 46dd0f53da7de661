// EvictionShadow: an eviction on a ShareStore (share_store.h). Its PREPARE
// copies the live root to root.bin (SnapshotRoot), the input the eviction
// reads while the next accesses overwrite the live root, and writes the new
// content of the evicted path's buckets into the shadow (BeginShadow,
// PutShadowBucket for each, SealShadow); EVICT_CHECK reads the sealed shadow
// back (ShadowDigests); EVICT_COMMIT makes it live (Commit).
//
// Guarantees: every mutation is durable (fdatasync) before it returns OK,
// except PutShadowBucket, whose writes become durable at SealShadow. The
// shadow goes to the free places of the share file only, so nothing an
// uncommitted eviction reads, and nothing live, is overwritten before its
// commit. Commit makes a sealed shadow live by a durable map write and only
// then records the eviction as applied, so re-running Commit after a crash is
// safe. A sealed shadow and a complete root snapshot survive a restart for
// the eviction not yet applied; the root snapshot and every shadow slot are
// checked against their digests before they are used.
//
// Threads: PutShadowBucket, ShadowBucketDigests, SealShadow, ReadRootSnapshot
// and RootSnapshotDigests run on a PREPARE's own thread, beside another
// thread's LiveTree reads and root writes (see ShareStore). The other calls
// here are not made while that thread runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/slot_digest.h"
#include "serverd/store_view.h"

namespace s3oram::serverd {

class EvictionShadow : public StoreView {
 public:
  // Copies the live root (checked against its digests) and its digests to
  // root.bin, durably, as the input of eviction `eviction` (which must be the
  // next one): root writes after this do not change what the eviction reads,
  // also after a restart. Keeps a complete snapshot of the same eviction.
  Status SnapshotRoot(std::uint64_t eviction);
  // eviction + 1 of the complete root snapshot held, 0 if none.
  std::uint64_t RootSnapshotEviction() const;
  // The root snapshot of `eviction` into out (bucket_elems() elements),
  // checked against its digests (Damaged naming root.bin).
  Status ReadRootSnapshot(std::uint64_t eviction, std::span<Elem> out) const;
  // Its Z slot digests (empty when there is no snapshot).
  std::span<const digest::SlotDigest> RootSnapshotDigests() const;

  // Shadow of one eviction: Begin, Put each bucket's new content, Seal (durable).
  // Begin needs eviction == applied_evictions (an eviction is computed from the
  // tree the previous one left) and distinct, in-range buckets; it discards any
  // earlier shadow, sealed or not (a retried prepare replaces the old attempt).
  // Puts become durable at Seal, which fails unless every bucket was put.
  Status BeginShadow(std::uint64_t eviction, std::uint32_t attempt,
                     std::span<const std::uint64_t> buckets);
  // Content of bucket index i of the list given to BeginShadow. Its slot
  // digests are computed from `data`, or taken from `digests` (Z of them)
  // when the caller holds them for exactly these elements already: the
  // stored digests of a bucket it just verified (LiveTree::VerifyBuckets), or
  // those of an earlier shadow bucket it put from the same buffer
  // (ShadowBucketDigests), or those of the root snapshot it read
  // (RootSnapshotDigests).
  Status PutShadowBucket(std::size_t i, std::span<const Elem> data,
                         std::span<const digest::SlotDigest> digests = {});
  // The digests PutShadowBucket stored for shadow bucket index i (Z of them;
  // valid until the next BeginShadow).
  std::span<const digest::SlotDigest> ShadowBucketDigests(std::size_t i) const;
  Status SealShadow();
  // Number + 1 of the eviction whose sealed shadow is waiting for commit; 0 if none.
  std::uint64_t SealedEviction() const;

  // The digests under a public key of every slot of the sealed shadow of
  // `eviction` (attempt `attempt`), bucket by bucket in BeginShadow's order,
  // each slot first checked against the digest stored with it (Damaged if
  // it fails). FailedPrecondition if that shadow is not the sealed one.
  // With `combination` set, also writes there `combination_rows` linear
  // combinations of all those slots (row r: sum_q w[r][q] * slot_q, w =
  // digest::CombinationWeights(combination_seed, rows, slots)), m elements each.
  Result<std::vector<digest::SlotDigest>> ShadowDigests(
      std::uint64_t eviction, std::uint32_t attempt, const digest::DigestKey& public_key,
      const digest::Seed& combination_seed = {}, std::size_t combination_rows = 0,
      std::vector<Elem>* combination = nullptr) const;

  // Makes the sealed shadow of `eviction` live and sets applied_evictions =
  // eviction + 1 and applied_seq = max(applied_seq, seq). Idempotent: OK if
  // already applied. FailedPrecondition if no sealed shadow for it exists.
  // Every shadow slot is checked against its digest before the map that
  // makes it live is written, unless ShadowDigests verified this sealed
  // shadow whole in this process (EVICT_CHECK, just before COMMIT): the same
  // bytes are not checked twice. Nothing is copied: one small map write and
  // the header, each made durable.
  Status Commit(std::uint64_t eviction, std::uint64_t seq, std::uint64_t epoch);

 private:
  friend class ShareStore;
  explicit EvictionShadow(ShareStore& store) : StoreView(store) {}
};

}  // namespace s3oram::serverd

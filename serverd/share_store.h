// A server's share of the ORAM tree on disk, and the shadow area evictions are
// computed into.
//
// Files in the data directory:
//   shares.bin  header (4 KiB), then N = 2^(H+1)-1 bucket places and their
//               slots' digests (oramcore/math/slot_digest.h), then 2·max(H,1)
//               spare places and their digests, then the bucket map (two
//               copies): the place each bucket lies in. Until the first
//               eviction every bucket b lies in place b. An eviction's shadow
//               is written into the places no bucket holds, and its commit
//               makes them live by writing the map (no copy). Created sparse
//               with ftruncate: all-zero bytes are a valid sharing of the
//               empty tree and zero is their digest, so initialising writes no
//               data. Read through a read-only mmap when the pages are
//               resident, else with pread (BucketForRead).
//   shadow.bin  the header of the shadow being written or sealed: which
//               eviction and attempt, which buckets, sealed or not.
//   root.bin    the root an eviction reads, with its digests, copied when its
//               PREPARE starts (SnapshotRoot): the next round's root writes
//               then overwrite the live root while the eviction is computed.
//   shares.bin.rebuild  a share file being rebuilt from the other servers
//               (CreateForRebuild); renamed to shares.bin by FinishRebuild, so
//               a store is never live before every bucket is written, and a
//               server restarted mid-rebuild comes up empty.
// The 4 KiB header holds two copies of ServerMeta (at 0 and 512), each with a
// generation number and a CRC32C-style checksum; updates alternate between
// copies and fdatasync, so a torn write leaves the other copy valid.
//
// Fail-stop storage: every slot is written together with its digest (WriteSlot,
// Commit, WriteBuckets) and every reader checks what it read against it
// (VerifyBucket, Digests for checks by linearity): a slot the disk changed is
// reported as Damaged, naming this server, the bucket and the slot, instead of
// entering an answer, an eviction or a rebuild. Digests are a checksum against
// faults, not a MAC against a server that lies (docs/SECURITY.md).
//
// Guarantees: every mutating call is durable (fdatasync) before it returns OK;
// Commit makes a sealed shadow live by a durable map write and only then
// records the eviction as applied, so re-running Commit after a crash is safe;
// nothing that an uncommitted eviction reads, and nothing live, is
// overwritten before its commit (the shadow goes to free places only).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/field.h"
#include "oramcore/math/slot_digest.h"
#include "oramcore/wire/wire.h"
#include "serverd/server_meta.h"

namespace s3oram::serverd {

using field::Elem;

// Not thread-safe for mutation: callers serialise mutating calls; Bucket() may
// be read concurrently with other readers. The one exception, for background
// eviction: while one thread writes the shadow (PutShadowBucket, SealShadow)
// and reads buckets other than the root and the root snapshot, another may
// write root slots (WriteSlot) and read any bucket; the two share the
// failure record, which is locked, the share file's descriptor (pwrite and
// fdatasync are safe beside each other) and the bucket map, which only
// Commit changes, never while a PREPARE runs.
class ShareStore {
 public:
  // Creates an empty store (sparse share file) in dir, replacing an existing one
  // only if overwrite is set. `sync` = false skips every fdatasync (the server's
  // `sync = false`, for tests and benchmarks): faster, but a crash may then lose
  // or reorder updates. The store holds an exclusive flock on dir while it lives,
  // so a second store (in any process) on the same dir is FailedPrecondition.
  static Result<std::unique_ptr<ShareStore>> Create(const std::string& dir, const ServerMeta& meta,
                                                    bool overwrite, bool sync = true);
  // Creates an empty sparse store to be filled by WriteBuckets (server
  // rebuild). Removes any share file and shadow in dir first (durably): the
  // caller has decided they are to be replaced. The store is not live
  // (rebuilding() is true) until FinishRebuild; WriteSlot, shadows and Commit
  // refuse it.
  static Result<std::unique_ptr<ShareStore>> CreateForRebuild(const std::string& dir,
                                                              const ServerMeta& meta,
                                                              bool sync = true);
  // Opens the store in dir; NotFound if there is none; Corruption if the header
  // or file size is inconsistent. A sealed shadow is kept for Commit.
  static Result<std::unique_ptr<ShareStore>> Open(const std::string& dir, bool sync = true);
  ~ShareStore();

  const ServerMeta& meta() const { return meta_; }
  std::uint64_t slot_elems() const { return meta_.shape.elems_per_slot; }
  std::uint64_t bucket_elems() const;
  std::uint64_t num_buckets() const;
  std::uint64_t file_bytes() const;
  std::uint64_t allocated_bytes() const;  // st_blocks * 512

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
  // Scrub: reads buckets [first, first + count) and checks every slot against
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
  // The Damaged status for slot `slot` of bucket b: names the server, the
  // file, the bucket and slot, and what repairs it. `what` says how it was
  // found.
  Status DamagedSlot(std::uint64_t b, std::uint64_t slot, const std::string& what) const;
  // For each bucket of [first, first + count): true if it lies entirely in a
  // file hole (never written: reads as zeros). Conservative: where the
  // filesystem cannot tell (no SEEK_DATA), every bucket counts as written.
  Result<std::vector<bool>> Holes(std::uint64_t first, std::uint64_t count) const;

  // Benchmarks only (wire.h AGE_FILL): overwrites whole buckets from `first`
  // on with `data` and their digests, durably. FailedPrecondition unless the
  // tree has never been used (no access or eviction applied, no shadow, no
  // root snapshot): it would overwrite live slots.
  Status FillUnusedBuckets(std::uint64_t first, std::span<const Elem> data);
  // OK if the tree has never been used (FillUnusedBuckets' condition), else
  // FailedPrecondition saying why.
  Status CheckUnused() const;

  // Rebuild only. Writes data (whole buckets from `first` on) without syncing;
  // FinishRebuild syncs everything.
  bool rebuilding() const;
  Status WriteBuckets(std::uint64_t first, std::span<const Elem> data);
  // fdatasync, header with `meta` (same fs id, index and shape), then the
  // rename to shares.bin and a directory sync: the store is live from here on.
  Status FinishRebuild(const ServerMeta& meta);

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
  Status UpdateMeta(const ServerMeta& meta);

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
  // stored digests of a bucket it just verified (VerifyBuckets), or those of
  // an earlier shadow bucket it put from the same buffer (ShadowBucketDigests).
  Status PutShadowBucket(std::size_t i, std::span<const Elem> data,
                         std::span<const digest::SlotDigest> digests = {});
  // The digests PutShadowBucket stored for shadow bucket index i (Z of them;
  // valid until the next BeginShadow).
  std::span<const digest::SlotDigest> ShadowBucketDigests(std::size_t i) const;
  Status SealShadow();
  // Copies the live root (checked against its digests) and its digests to
  // root.bin, durably, as the input of eviction `eviction` (which must be the
  // next one): root writes after this do not change what the eviction reads,
  // also after a restart. Keeps a complete snapshot of the same eviction.
  Status SnapshotRoot(std::uint64_t eviction);
  // Rebuild only: writes `data` (bucket_elems() elements, this server's share
  // reconstructed from the others') as the root snapshot of `eviction`,
  // durably, with fresh digests.
  Status WriteRootSnapshot(std::uint64_t eviction, std::span<const Elem> data);
  // eviction + 1 of the complete root snapshot held, 0 if none.
  std::uint64_t RootSnapshotEviction() const;
  // The root snapshot of `eviction` into out (bucket_elems() elements),
  // checked against its digests (Damaged naming root.bin).
  Status ReadRootSnapshot(std::uint64_t eviction, std::span<Elem> out) const;
  // Its Z slot digests (empty when there is no snapshot).
  std::span<const digest::SlotDigest> RootSnapshotDigests() const;
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
  // Number + 1 of the eviction whose sealed shadow is waiting for commit; 0 if none.
  std::uint64_t SealedEviction() const;
  // Where bucket b's data and its Z slot digests start in shares.bin, and
  // where those of each bucket of the shadow being written or sealed do
  // (empty if none): for tools and tests that inspect or damage the file.
  struct FileRange {
    std::uint64_t data = 0;
    std::uint64_t digests = 0;
  };
  FileRange BucketInFile(std::uint64_t b) const;
  std::vector<FileRange> ShadowInFile() const;
  // The same for every bucket (index b = 1..N; entry 0 unused) of the share
  // file at `shares_path`, read from its header and bucket map without
  // opening the store: no lock is taken and nothing is upgraded or checked
  // beyond what reading the map needs. For tests and forensic tools; a store
  // that changes meanwhile may be read half old, half new.
  // `places`, if given, receives every bucket place of the file, live or
  // free (a free one holds whatever bucket last lay there).
  static Result<std::vector<FileRange>> InspectFile(const std::string& shares_path,
                                                    std::vector<FileRange>* places = nullptr);
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
  ShareStore() = default;
  static Result<std::unique_ptr<ShareStore>> CreateFile(const std::string& dir,
                                                        const ServerMeta& meta, bool overwrite,
                                                        bool sync, bool rebuild);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ServerMeta meta_;
};

}  // namespace s3oram::serverd

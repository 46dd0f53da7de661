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
// (VerifyBuckets, Digests for checks by linearity): a slot the disk changed is
// reported as Damaged, naming this server, the bucket and the slot, instead of
// entering an answer, an eviction or a rebuild. Digests are a checksum against
// faults, not a MAC against a server that lies (docs/SECURITY.md).
//
// The operations are split by concern into views (store_view.h), each in a
// header of its own with what it guarantees: the live tree (tree(),
// store_tree.h), an eviction's root snapshot, shadow and commit (shadow(),
// store_shadow.h), the slot checks of a scrub (scrub(), store_scrub.h), the
// store as a rebuild's target (rebuild(), store_rebuild.h), the benchmarks'
// age fill (age_fill(), store_age_fill.h) and the file's size and layout
// (inspection(), store_inspection.h). ShareStore itself creates, opens and
// closes the store and holds its meta. The implementation is in files by
// concern too: share_store.cpp, share_store_scrub.cpp,
// share_store_eviction.cpp, share_store_rebuild.cpp, share_store_inspect.cpp.
//
// Guarantees: every mutating call is durable (fdatasync) before it returns OK
// (PutShadowBucket's and WriteBuckets' writes: at SealShadow and FinishRebuild);
// Commit makes a sealed shadow live by a durable map write and only then
// records the eviction as applied, so re-running Commit after a crash is safe;
// nothing that an uncommitted eviction reads, and nothing live, is
// overwritten before its commit (the shadow goes to free places only).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "oramcore/base/status.h"
#include "serverd/server_meta.h"
#include "serverd/store_age_fill.h"
#include "serverd/store_inspection.h"
#include "serverd/store_rebuild.h"
#include "serverd/store_scrub.h"
#include "serverd/store_shadow.h"
#include "serverd/store_tree.h"
#include "serverd/store_view.h"

namespace s3oram::serverd {

// Not thread-safe for mutation: callers serialise mutating calls; the
// LiveTree's reads (Bucket() and the others) may run concurrently with other
// readers. The one exception, for background eviction: while one thread
// writes the shadow (EvictionShadow::PutShadowBucket, SealShadow) and reads
// buckets other than the root and the root snapshot, another may write root
// slots (LiveTree::WriteSlot) and read any bucket; the two share the failure
// record, which is locked, the share file's descriptor (pwrite and fdatasync
// are safe beside each other) and the bucket map, which only Commit changes,
// never while a PREPARE runs.
class ShareStore {
 public:
  // Creates an empty store (sparse share file) in dir, replacing an existing one
  // only if overwrite is set. `sync` = false skips every fdatasync (the server's
  // `sync = false`, for tests and benchmarks): faster, but a crash may then lose
  // or reorder updates. The store holds an exclusive flock on dir while it lives,
  // so a second store (in any process) on the same dir is FailedPrecondition.
  static Result<std::unique_ptr<ShareStore>> Create(const std::string& dir, const ServerMeta& meta,
                                                    bool overwrite, bool sync = true);
  // Creates an empty sparse store to be filled through rebuild() (server
  // rebuild). Removes any share file and shadow in dir first (durably): the
  // caller has decided they are to be replaced. The store is not live
  // (rebuilding() is true) until StoreRebuild::FinishRebuild; WriteSlot,
  // shadows and Commit refuse it.
  static Result<std::unique_ptr<ShareStore>> CreateForRebuild(const std::string& dir,
                                                              const ServerMeta& meta,
                                                              bool sync = true);
  // Opens the store in dir; NotFound if there is none; Corruption if the header
  // or file size is inconsistent. A sealed shadow is kept for Commit. A store
  // whose catch-up was cut off (its mark on disk) opens as a catch-up's
  // target (rebuilding() and catching_up()): it serves nothing until a
  // catch-up from the evictions its header names, begun again, finishes.
  static Result<std::unique_ptr<ShareStore>> Open(const std::string& dir, bool sync = true);
  ~ShareStore();
  // The views below hold a reference to their store.
  ShareStore(const ShareStore&) = delete;
  ShareStore& operator=(const ShareStore&) = delete;

  const ServerMeta& meta() const { return meta_; }
  // True from CreateForRebuild until FinishRebuild: the store is not live yet.
  // Kept here rather than on StoreRebuild: every request's check asks it.
  bool rebuilding() const;
  // Rebuilding in place, as a catch-up's target (StoreRebuild::BeginCatchUp,
  // or a catch-up cut off): meta() is the state it is caught up from.
  bool catching_up() const;

  // The views, valid as long as the store (store_view.h).
  LiveTree& tree() { return tree_; }
  const LiveTree& tree() const { return tree_; }
  EvictionShadow& shadow() { return shadow_; }
  const EvictionShadow& shadow() const { return shadow_; }
  const StoreScrub& scrub() const { return scrub_; }
  StoreRebuild& rebuild() { return rebuild_; }
  AgeFill& age_fill() { return age_fill_; }
  const StoreInspection& inspection() const { return inspection_; }

 private:
  friend class StoreView;
  friend class LiveTree;
  friend class EvictionShadow;
  friend class StoreScrub;
  friend class StoreRebuild;
  friend class AgeFill;
  friend class StoreInspection;

  ShareStore() = default;
  static Result<std::unique_ptr<ShareStore>> CreateFile(const std::string& dir,
                                                        const ServerMeta& meta, bool overwrite,
                                                        bool sync, bool rebuild);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ServerMeta meta_;
  LiveTree tree_{*this};
  EvictionShadow shadow_{*this};
  StoreScrub scrub_{*this};
  StoreRebuild rebuild_{*this};
  AgeFill age_fill_{*this};
  StoreInspection inspection_{*this};
};

inline std::uint64_t StoreView::slot_elems() const { return s_.meta_.shape.elems_per_slot; }

}  // namespace s3oram::serverd

// StoreRebuild: a ShareStore (share_store.h) as the target of a server
// rebuild. ShareStore::CreateForRebuild makes an empty sparse file,
// shares.bin.rebuild; WriteBuckets fills it with the buckets reconstructed
// from the other servers, WriteRootSnapshot writes the root snapshot of the
// pending eviction if there is one, and FinishRebuild makes the store live.
//
// Guarantees: each call refuses a store that is not being rebuilt
// (ShareStore::rebuilding()). Nothing is live before FinishRebuild: it syncs
// the data and the bucket map, then the header, then renames the file to
// shares.bin and syncs the directory, so a server restarted mid-rebuild comes
// up empty rather than with half a share. Every bucket is written with fresh
// digests of what was written (a new digest key per rebuild). A catch-up
// (BeginCatchUp) rewrites only some buckets of the live file, under the
// store's digest key, and is marked on disk until FinishRebuild, so a server
// restarted mid-catch-up comes up still marked: serving nothing, to be
// caught up again from the evictions its header names (the buckets the cut
// catch-up wrote are among those it sends again) or rebuilt in full.
#pragma once

#include <cstdint>
#include <span>

#include "oramcore/base/status.h"
#include "serverd/server_meta.h"
#include "serverd/store_view.h"

namespace s3oram::serverd {

class StoreRebuild : public StoreView {
 public:
  // Writes data (whole buckets from `first` on) without syncing;
  // FinishRebuild syncs everything.
  Status WriteBuckets(std::uint64_t first, std::span<const Elem> data);
  // Writes `data` (bucket_elems() elements, this server's share
  // reconstructed from the others') as the root snapshot of `eviction`,
  // durably, with fresh digests.
  Status WriteRootSnapshot(std::uint64_t eviction, std::span<const Elem> data);
  // fdatasync, header with `meta` (same fs id, index and shape), then the
  // rename to shares.bin and a directory sync: the store is live from here on.
  // After BeginCatchUp: fdatasync, the bucket map for meta's evictions, the
  // header, then the catch-up mark removed (no rename).
  Status FinishRebuild(const ServerMeta& meta);
  // Turns a live store into the target of a catch-up: WriteBuckets and
  // WriteRootSnapshot then rewrite buckets of shares.bin in place (through
  // the bucket map), the others keep their shares. The shadow and the root
  // snapshot are dropped (they belong to an eviction the others may have
  // done otherwise). The catch-up mark is durable first: from here until
  // FinishRebuild the file is no sharing of one state, and a restart opens
  // it marked (ShareStore::Open), never live. On a store opened marked it
  // begins the catch-up again.
  Status BeginCatchUp();

 private:
  friend class ShareStore;
  explicit StoreRebuild(ShareStore& store) : StoreView(store) {}
};

}  // namespace s3oram::serverd

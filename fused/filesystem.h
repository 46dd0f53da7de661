// Filesystem: the libfuse low-level operations of s3oramfs.
//
// Metadata operations go to the MetadataStore (one SQLite transaction each),
// file contents to FileData. The kernel's lookup count of every inode is
// tracked here: an inode unlinked while the kernel still knows it is kept as
// an orphan and freed (blocks included) when the count drops to zero.
// Permissions are checked by the kernel (default_permissions is always on).
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "fused/file_data.h"
#include "fused/metadata_store.h"

namespace s3oram::fs {

class Filesystem {
 public:
  Filesystem(MetadataStore& meta, FileData& data, double timeout_seconds);

  // The operation table; pass `this` as the session's userdata.
  static const fuse_lowlevel_ops& Operations();

  // Flushed and synced in `destroy` (unmount, SIGTERM); true once that ran.
  bool destroyed() const { return destroyed_; }
  // How long `destroy` tries the write-back again while it fails with EIO
  // (a server down, perhaps restarting) before the blocks are marked lost.
  static constexpr std::chrono::seconds kUnmountWriteBackWait{30};

  // Handlers (public for the C callbacks; not an API).
  void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
  void Forget(fuse_ino_t ino, std::uint64_t nlookup);
  void Destroy();
  MetadataStore& meta() { return meta_; }
  FileData& data() { return data_; }
  double timeout() const { return timeout_; }
  void ReplyEntry(fuse_req_t req, const Attr& a);
  void ReplyCreate(fuse_req_t req, const Attr& a, fuse_file_info* fi);
  void FillStat(const Attr& a, struct stat* st) const;
  // After an unlink/rmdir/rename dropped `ino`'s last link: frees it now if
  // the kernel no longer knows it (otherwise Forget will).
  void Orphaned(Ino ino);
  // Replies with `err`, logging the store's message behind an EIO.
  void ReplyErr(fuse_req_t req, int err, const char* op);
  // Fail-stop: once a server has reported damaged storage the engine takes
  // no writes (OramClient::writes_stopped), and the mount behaves as a
  // read-only one: every change (`op`) is refused with EROFS here, before
  // anything is accepted that could not be stored. Replies and returns true
  // then; false otherwise (nothing replied).
  bool RefuseWhileStopped(fuse_req_t req, const char* op);

 private:
  void AddLookup(Ino ino);
  // The entry reply for `a`, its lookup counted.
  fuse_entry_param Entry(const Attr& a);
  // True if the kernel holds no lookup of `ino`.
  bool Unknown(Ino ino);

  MetadataStore& meta_;
  FileData& data_;
  const double timeout_;
  std::mutex lookups_mu_;
  std::unordered_map<Ino, std::uint64_t> lookups_;
  bool destroyed_ = false;
  std::atomic<bool> stopped_logged_{false};
};

}  // namespace s3oram::fs

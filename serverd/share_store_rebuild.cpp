// StoreRebuild (store_rebuild.h), the store as the target of a rebuild: a new
// share file written bucket by bucket beside the old one, renamed over it by
// FinishRebuild. And AgeFill (store_age_fill.h), which writes whole buckets the
// same way into a live, unused tree.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <future>
#include <limits>
#include <mutex>
#include <string_view>
#include <system_error>
#include <unordered_set>
#include <utility>

#include "oramcore/base/durable_file.h"
#include "oramcore/base/fault_point.h"
#include "oramcore/base/random.h"
#include "oramcore/math/slot_digest.h"
#include "serverd/share_store_internal.h"

namespace s3oram::serverd {

bool ShareStore::rebuilding() const { return impl_->rebuilding; }
bool ShareStore::catching_up() const { return impl_->catching_up; }

Status StoreRebuild::WriteBuckets(std::uint64_t first, std::span<const Elem> data) {
  ShareStore::Impl& im = *s_.impl_;
  S3ORAM_RETURN_IF_ERROR(im.Usable());
  if (!im.rebuilding) {
    return Status::FailedPrecondition("WriteBuckets: store is not being rebuilt");
  }
  return im.WriteWholeBuckets(first, data, im.rebuild_path, "WriteBuckets", "rebuilt bucket data");
}

Status AgeFill::CheckUnused() const {
  const ShareStore::Impl& im = *s_.impl_;
  if (s_.meta_.applied_seq != 0 || s_.meta_.applied_evictions != 0 ||
      im.shadow_state != ShadowState::kNone || im.root_snapshot != 0) {
    return Status::FailedPrecondition(
        "age fill: the tree in " + im.dir + " has been used (" +
        std::to_string(s_.meta_.applied_seq) + " accesses, " +
        std::to_string(s_.meta_.applied_evictions) +
        " evictions applied); filling would overwrite its blocks, so it is only for a new "
        "filesystem");
  }
  return Status::Ok();
}

Status AgeFill::FillUnusedBuckets(std::uint64_t first, std::span<const Elem> data) {
  ShareStore::Impl& im = *s_.impl_;
  S3ORAM_RETURN_IF_ERROR(im.Live());
  S3ORAM_RETURN_IF_ERROR(CheckUnused());
  S3ORAM_RETURN_IF_ERROR(
      im.WriteWholeBuckets(first, data, im.shares_path, "FillUnusedBuckets", "age fill data"));
  return im.Sync(im.fd.get(), im.shares_path);
}

Status StoreRebuild::FinishRebuild(const ServerMeta& meta) {
  ShareStore::Impl& im = *s_.impl_;
  S3ORAM_RETURN_IF_ERROR(im.Usable());
  if (!im.rebuilding) {
    return Status::FailedPrecondition("FinishRebuild: store is not being rebuilt");
  }
  if (meta.fs_id != s_.meta_.fs_id || meta.server_index != s_.meta_.server_index ||
      !(meta.shape == s_.meta_.shape)) {
    return Status::InvalidArgument("FinishRebuild cannot change the store's identity or shape");
  }
  if (im.catching_up) {
    // Data, then the map for the new count of evictions (the places are
    // the store's own: only bucket contents changed), then the header; the
    // mark goes last, so until the header is durable the store stays marked.
    S3ORAM_RETURN_IF_ERROR(im.Sync(im.fd.get(), im.shares_path));
    S3ORAM_RETURN_IF_ERROR(im.WriteMapCopy(meta.applied_evictions, im.places));
    S3ORAM_RETURN_IF_ERROR(im.Sync(im.fd.get(), im.shares_path));
    S3ORAM_RETURN_IF_ERROR(im.WriteMeta(meta));
    s_.meta_ = meta;
    if (::unlink(im.CatchUpMarkerPath().c_str()) != 0 && errno != ENOENT) {
      return SysError("removing", im.CatchUpMarkerPath(), errno);
    }
    if (im.sync) S3ORAM_RETURN_IF_ERROR(SyncDirectory(im.dir));
    im.rebuilding = false;
    im.catching_up = false;
    return Status::Ok();
  }
  // Data and map durable, then the header, then the name: a shares.bin on
  // disk is always complete. Every bucket was written in its own place.
  im.SetIdentityPlaces();
  {
    const std::vector<std::uint8_t> map =
        EncodeMap(meta.applied_evictions, im.places, im.geo.map_copy_bytes);
    S3ORAM_RETURN_IF_ERROR(PwriteAll(
        im.fd.get(), map.data(), map.size(),
        im.geo.map_offset + (meta.applied_evictions % 2) * im.geo.map_copy_bytes, im.rebuild_path));
  }
  S3ORAM_RETURN_IF_ERROR(im.Sync(im.fd.get(), im.rebuild_path));
  S3ORAM_RETURN_IF_ERROR(im.WriteMeta(meta));
  s_.meta_ = meta;
  if (::rename(im.rebuild_path.c_str(), im.shares_path.c_str()) != 0) {
    return SysError("renaming " + im.rebuild_path + " to", im.shares_path, errno);
  }
  if (im.sync) S3ORAM_RETURN_IF_ERROR(SyncDirectory(im.dir));
  im.rebuilding = false;
  return Status::Ok();
}

Status StoreRebuild::BeginCatchUp() {
  ShareStore::Impl& im = *s_.impl_;
  // A catch-up cut off (ShareStore::Open found the mark) is begun again as
  // it stands: the header still names the evictions of its old state.
  if (!im.catching_up) S3ORAM_RETURN_IF_ERROR(im.Live());
  S3ORAM_RETURN_IF_ERROR(im.Usable());
  {
    Fd mark(::open(im.CatchUpMarkerPath().c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    if (!mark.valid()) return SysError("creating", im.CatchUpMarkerPath(), errno);
  }
  if (im.sync) S3ORAM_RETURN_IF_ERROR(SyncDirectory(im.dir));
  return im.EnterCatchUp();
}

Status ShareStore::Impl::EnterCatchUp() {
  // From here the store is not live; a failure below leaves it marked, and
  // a restart opens it marked (ShareStore::Open), to be caught up again.
  rebuilding = true;
  catching_up = true;
  rebuild_path = shares_path;
  SetShadowState(ShadowState::kNone);
  shadow_fd = Fd();
  root_fd = Fd();
  root_snapshot = 0;
  root_digests.clear();
  for (const std::string& f : {shadow_path, root_path}) {
    if (::unlink(f.c_str()) != 0 && errno != ENOENT) return SysError("removing", f, errno);
  }
  if (sync) S3ORAM_RETURN_IF_ERROR(SyncDirectory(dir));
  return Status::Ok();
}

Status StoreRebuild::WriteRootSnapshot(std::uint64_t eviction, std::span<const Elem> data) {
  ShareStore::Impl& im = *s_.impl_;
  S3ORAM_RETURN_IF_ERROR(im.Usable());
  if (!im.rebuilding) {
    return Status::FailedPrecondition("a root snapshot is written whole only by a rebuild");
  }
  if (data.size() != bucket_elems()) {
    return Status::InvalidArgument("root snapshot has " + std::to_string(data.size()) +
                                   " elements, expected " + std::to_string(bucket_elems()));
  }
  std::vector<digest::SlotDigest> d(im.geo.z);
  S3ORAM_RETURN_IF_ERROR(im.DigestBuckets(data, d, "rebuilt root snapshot"));
  return im.WriteRootFile(s_.meta_.fs_id, eviction, data.data(), std::move(d));
}

}  // namespace s3oram::serverd

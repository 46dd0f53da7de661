// ShareStore: creating and opening the share file (and upgrading older formats);
// the views' shape (store_view.h); the LiveTree's bucket reads, holes, root
// write and header (store_tree.h; its digest checks are in
// share_store_scrub.cpp).
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

namespace {

// Opens dir and takes the exclusive lock that keeps two stores off one dir.
Result<Fd> LockDir(const std::string& dir) {
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d.valid()) {
    if (errno == ENOENT) return Status::NotFound("data directory " + dir + " does not exist");
    return SysError("opening directory", dir, errno);
  }
  while (::flock(d.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) {
      return Status::FailedPrecondition("data directory " + dir +
                                        " is in use by another share store (flock held)");
    }
    return SysError("locking directory", dir, errno);
  }
  return d;
}

// The header copy that holds the current meta.
struct MetaCopy {
  ServerMeta meta;
  digest::Seed seed{};
  std::uint32_t version = 0;
  std::uint64_t generation = 0;
};

// The valid copy with the highest generation is the current meta; the other
// is either one update older or a torn write of the newest update, whose data
// was synced before the header write began but which was never acknowledged.
Result<MetaCopy> PickMetaCopy(const std::uint8_t* header, const std::string& path) {
  MetaCopy best;
  bool found = false;
  std::string why[2];
  for (int c = 0; c < 2; ++c) {
    ServerMeta m;
    digest::Seed seed{};
    std::uint32_t version = 0;
    std::uint64_t gen = 0;
    if (!DecodeMeta(header + c * kMetaCopyBytes, &m, &seed, &version, &gen, &why[c])) {
      continue;
    }
    if (!found || gen > best.generation) {
      best.meta = m;
      best.generation = gen;
      best.version = version;
      best.seed = seed;
      found = true;
    }
  }
  if (!found) {
    return Status::Corruption(path + ": no valid header copy (copy 0: " + why[0] +
                              "; copy 1: " + why[1] + ")");
  }
  return best;
}

}  // namespace

ShareStore::~ShareStore() = default;

std::uint64_t StoreView::bucket_elems() const {
  return std::uint64_t{s_.meta_.shape.bucket_size} * s_.meta_.shape.elems_per_slot;
}
std::uint64_t StoreView::num_buckets() const { return s_.impl_->geo.num_buckets; }

const Elem* LiveTree::Bucket(std::uint64_t b) const {
  const ShareStore::Impl& im = *s_.impl_;
  assert(b >= 1 && b <= im.geo.num_buckets && "bucket out of range; callers validate");
  // The header region is 4096 bytes and buckets are whole elements, so every
  // bucket is Elem-aligned within the page-aligned mapping.
  return reinterpret_cast<const Elem*>(im.map + im.BucketOffset(b));
}

Status LiveTree::ReadBucket(std::uint64_t b, std::span<Elem> out) const {
  const ShareStore::Impl& im = *s_.impl_;
  if (b < 1 || b > im.geo.num_buckets || out.size() != bucket_elems()) {
    return Status::InvalidArgument("ReadBucket: bucket or buffer size out of range");
  }
  return PreadAll(im.fd.get(), out.data(), out.size_bytes(), im.BucketOffset(b), im.shares_path);
}

Result<const Elem*> LiveTree::BucketForRead(std::uint64_t b, std::span<Elem> scratch) const {
  const ShareStore::Impl& im = *s_.impl_;
  if (b < 1 || b > im.geo.num_buckets) {
    return Status::InvalidArgument("BucketForRead: bucket out of range");
  }
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t off = im.BucketOffset(b);
  const std::uint64_t begin = off / page * page;
  const std::uint64_t end = off + bucket_elems() * sizeof(Elem);
  std::vector<unsigned char> resident((end - begin + page - 1) / page);
  void* addr = const_cast<std::uint8_t*>(im.map + begin);  // mincore only inspects
  if (::mincore(addr, end - begin, resident.data()) == 0 &&
      std::all_of(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; })) {
    return Bucket(b);
  }
  S3ORAM_RETURN_IF_ERROR(ReadBucket(b, scratch));
  return static_cast<const Elem*>(scratch.data());
}

Result<std::unique_ptr<ShareStore>> ShareStore::Create(const std::string& dir,
                                                       const ServerMeta& meta, bool overwrite,
                                                       bool sync) {
  return CreateFile(dir, meta, overwrite, sync, /*rebuild=*/false);
}

Result<std::unique_ptr<ShareStore>> ShareStore::CreateForRebuild(const std::string& dir,
                                                                 const ServerMeta& meta,
                                                                 bool sync) {
  return CreateFile(dir, meta, /*overwrite=*/true, sync, /*rebuild=*/true);
}

Result<std::unique_ptr<ShareStore>> ShareStore::CreateFile(const std::string& dir,
                                                           const ServerMeta& meta, bool overwrite,
                                                           bool sync, bool rebuild) {
  Geometry geo;
  std::string why;
  if (!ComputeGeometry(meta.shape, &geo, &why)) {
    return Status::InvalidArgument("cannot create share store in " + dir + ": " + why);
  }
  S3ORAM_RETURN_IF_ERROR(MakeDirs(dir));
  S3ORAM_ASSIGN_OR_RETURN(Fd dir_fd, LockDir(dir));

  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->shares_path = dir + "/shares.bin";
  impl->shadow_path = dir + "/shadow.bin";
  impl->root_path = dir + "/root.bin";
  impl->sync = sync;
  impl->geo = geo;
  impl->dir_fd = std::move(dir_fd);
  // A new key per store (and per rebuild): digests are this disk's record of
  // what was written to it, nothing another server could share.
  random::Bytes(impl->seed);
  impl->key = std::make_unique<const digest::DigestKey>(impl->seed, meta.shape.elems_per_slot);

  struct stat st {};
  if (::lstat(impl->shares_path.c_str(), &st) == 0) {
    if (!overwrite) {
      return Status::AlreadyExists("a share store already exists in " + dir +
                                   " (overwrite not requested)");
    }
  } else if (errno != ENOENT) {
    return SysError("stat of", impl->shares_path, errno);
  }

  // The shadow goes first, durably: a leftover sealed shadow must never meet the
  // new share file (it could even carry the same fs id and eviction number).
  if (::unlink(impl->shadow_path.c_str()) != 0 && errno != ENOENT) {
    return SysError("removing", impl->shadow_path, errno);
  }
  // So does a root snapshot, for the same reason.
  if (::unlink(impl->root_path.c_str()) != 0 && errno != ENOENT) {
    return SysError("removing", impl->root_path, errno);
  }
  const std::string rebuild_path = dir + "/shares.bin.rebuild";
  if (rebuild) {
    // The store being replaced goes too, durably, before the rebuild starts: a
    // server restarted before FinishRebuild then comes up empty rather than
    // serving the share this rebuild was asked to replace.
    if (::unlink(impl->shares_path.c_str()) != 0 && errno != ENOENT) {
      return SysError("removing", impl->shares_path, errno);
    }
    // With it, the mark of an interrupted catch-up of it.
    if (::unlink(impl->CatchUpMarkerPath().c_str()) != 0 && errno != ENOENT) {
      return SysError("removing", impl->CatchUpMarkerPath(), errno);
    }
    if (sync) S3ORAM_RETURN_IF_ERROR(SyncDirectory(dir));
  } else if (::unlink(rebuild_path.c_str()) != 0 && errno != ENOENT) {
    return SysError("removing", rebuild_path, errno);  // an abandoned rebuild
  }
  // The new file is built under a temporary name and renamed into place, so a
  // crash leaves either the old store or a complete new one. A rebuilt file
  // keeps its temporary name until FinishRebuild.
  const std::string tmp_path = rebuild ? rebuild_path : dir + "/shares.bin.tmp";
  if (::unlink(tmp_path.c_str()) != 0 && errno != ENOENT) {
    return SysError("removing", tmp_path, errno);
  }
  Fd fd(::open(tmp_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return SysError("creating", tmp_path, errno);
  auto fail = [&](Status s) {
    ::unlink(tmp_path.c_str());
    return s;
  };
  // Sparse: ftruncate allocates nothing, and zero bytes are a valid sharing of
  // the empty tree.
  while (::ftruncate(fd.get(), static_cast<off_t>(geo.file_bytes)) != 0) {
    if (errno == EINTR) continue;
    return fail(SysError("sizing", tmp_path, errno));
  }
  // Both copies valid from the start (generations 0 and 1), so one damaged copy
  // never makes a fresh store unreadable.
  std::array<std::uint8_t, kHeaderRegion> header{};
  EncodeMeta(meta, impl->seed, 0, header.data());
  EncodeMeta(meta, impl->seed, 1, header.data() + kMetaCopyBytes);
  if (Status s = PwriteAll(fd.get(), header.data(), header.size(), 0, tmp_path); !s.ok()) {
    return fail(s);
  }
  // Every bucket in its own place; a rebuild writes its map again at
  // FinishRebuild, for the evictions its header will then record.
  impl->SetIdentityPlaces();
  {
    const std::vector<std::uint8_t> map =
        EncodeMap(meta.applied_evictions, impl->places, geo.map_copy_bytes);
    const std::uint64_t at = geo.map_offset + (meta.applied_evictions % 2) * geo.map_copy_bytes;
    if (Status s = PwriteAll(fd.get(), map.data(), map.size(), at, tmp_path); !s.ok()) {
      return fail(s);
    }
  }
  if (sync) {
    if (Status s = DataSync(fd.get(), tmp_path); !s.ok()) return fail(s);
  }
  impl->fd = std::move(fd);
  if (Status s = impl->Map(tmp_path); !s.ok()) return fail(s);
  if (rebuild) {
    impl->rebuilding = true;
    impl->rebuild_path = tmp_path;
  } else {
    if (::rename(tmp_path.c_str(), impl->shares_path.c_str()) != 0) {
      return fail(SysError("renaming " + tmp_path + " to", impl->shares_path, errno));
    }
    // The mark of an interrupted catch-up belonged to the file just replaced.
    if (::unlink(impl->CatchUpMarkerPath().c_str()) != 0 && errno != ENOENT) {
      return SysError("removing", impl->CatchUpMarkerPath(), errno);
    }
    if (sync) S3ORAM_RETURN_IF_ERROR(SyncDirectory(dir));
  }
  impl->generation = 1;

  std::unique_ptr<ShareStore> store(new ShareStore());
  store->impl_ = std::move(impl);
  store->meta_ = meta;
  return store;
}

Status ShareStore::Impl::CheckSizeAndUpgrade(const ServerMeta& m, std::uint32_t version,
                                             std::uint64_t size) {
  const std::string& path = shares_path;
  if (version == kMetaVersion1) {
    // Any size from format 1's to format 3's: an upgrade may have been
    // interrupted after it grew the file (the header is written last).
    if (size < geo.v1_file_bytes || size > geo.file_bytes) {
      return Status::Corruption(path + " is " + std::to_string(size) + " bytes but shape " +
                                ShapeText(m.shape) + " needs " + std::to_string(geo.v1_file_bytes) +
                                " (format 1)");
    }
    return UpgradeToDigests(m);
  }
  if (version == kMetaVersion2) {
    if (size < geo.v2_file_bytes || size > geo.file_bytes) {
      return Status::Corruption(path + " is " + std::to_string(size) + " bytes but shape " +
                                ShapeText(m.shape) + " needs " + std::to_string(geo.v2_file_bytes) +
                                " (format 2)");
    }
    key = std::make_unique<const digest::DigestKey>(seed, m.shape.elems_per_slot);
    return UpgradeToSparePlaces(m);
  }
  if (size != geo.file_bytes) {
    return Status::Corruption(path + " is " + std::to_string(size) + " bytes but shape " +
                              ShapeText(m.shape) + " needs " + std::to_string(geo.file_bytes));
  }
  key = std::make_unique<const digest::DigestKey>(seed, m.shape.elems_per_slot);
  return ReadMapCopy(m.applied_evictions);
}

// A sealed shadow survives only if it belongs to this store and is the next
// eviction; one for an earlier eviction is obsolete (its commit completed),
// and anything unsealed, torn or foreign is ignored and overwritten by the
// next BeginShadow.
Status ShareStore::Impl::LoadSealedShadow(const ServerMeta& m) {
  Fd sfd(::open(shadow_path.c_str(), O_RDWR | O_CLOEXEC));
  if (!sfd.valid() && errno != ENOENT) return SysError("opening", shadow_path, errno);
  ShadowHeader sh;
  if (sfd.valid() && ReadShadowHeader(sfd.get(), shadow_path, &sh) && sh.sealed &&
      sh.version == kShadowVersion && sh.fs_id == m.fs_id && sh.shape == m.shape &&
      sh.eviction == m.applied_evictions && sh.buckets.size() <= geo.spare) {
    std::unordered_set<std::uint64_t> seen;
    bool ok = true;
    for (std::uint64_t b : sh.buckets) {
      ok = ok && b >= 1 && b <= geo.num_buckets && seen.insert(b).second;
    }
    if (ok) {
      // The shadow lies in the free places, in list order (BeginShadow);
      // the digests are small (8 bytes a slot) and read now, the data stay
      // on disk until Commit, which checks them against these.
      std::vector<std::uint32_t> free = FreePlaces();
      free.resize(sh.buckets.size());
      std::vector<digest::SlotDigest> d(sh.buckets.size() * geo.z);
      for (std::size_t i = 0; i < free.size(); ++i) {
        S3ORAM_RETURN_IF_ERROR(PreadAll(fd.get(), d.data() + i * geo.z, geo.z * kDigestBytes,
                                        PlaceDigestOffset(free[i]), shares_path));
      }
      SetShadowState(ShadowState::kSealed);
      shadow = std::move(sh);
      shadow_places = std::move(free);
      shadow_filled.assign(shadow.buckets.size(), true);
      shadow_digests = std::move(d);
    }
  }
  shadow_fd = std::move(sfd);
  return Status::Ok();
}

// The root snapshot counts only for the eviction not yet applied.
Status ShareStore::Impl::LoadRootSnapshot(const ServerMeta& m) {
  Fd rfd(::open(root_path.c_str(), O_RDWR | O_CLOEXEC));
  if (!rfd.valid() && errno != ENOENT) return SysError("opening", root_path, errno);
  RootHeader rh;
  if (rfd.valid() && ReadRootHeader(rfd.get(), root_path, &rh) && rh.fs_id == m.fs_id &&
      rh.eviction == m.applied_evictions && rh.bucket_bytes == geo.bucket_bytes && rh.z == geo.z) {
    struct stat rst {};
    const std::uint64_t need = kHeaderRegion + rh.bucket_bytes + rh.z * kDigestBytes;
    if (::fstat(rfd.get(), &rst) == 0 && static_cast<std::uint64_t>(rst.st_size) >= need) {
      std::vector<digest::SlotDigest> d(rh.z);
      S3ORAM_RETURN_IF_ERROR(PreadAll(rfd.get(), d.data(), d.size() * kDigestBytes,
                                      kHeaderRegion + rh.bucket_bytes, root_path));
      root_snapshot = rh.eviction + 1;
      root_digests = std::move(d);
    }
  }
  root_fd = std::move(rfd);
  return Status::Ok();
}

Result<std::unique_ptr<ShareStore>> ShareStore::Open(const std::string& dir, bool sync) {
  S3ORAM_ASSIGN_OR_RETURN(Fd dir_fd, LockDir(dir));
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->shares_path = dir + "/shares.bin";
  impl->shadow_path = dir + "/shadow.bin";
  impl->root_path = dir + "/root.bin";
  impl->sync = sync;
  impl->dir_fd = std::move(dir_fd);
  const std::string& path = impl->shares_path;

  // A catch-up cut off: the file holds some buckets of the newer state and
  // the rest of the state its header names. It opens as it stands, and
  // leaves it only by a catch-up begun again (or a rebuild in full).
  const bool cut_catch_up = ::access(impl->CatchUpMarkerPath().c_str(), F_OK) == 0;
  impl->fd = Fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!impl->fd.valid()) {
    if (errno == ENOENT) return Status::NotFound("no share store in " + dir + " (no shares.bin)");
    return SysError("opening", path, errno);
  }
  struct stat st {};
  if (::fstat(impl->fd.get(), &st) != 0) return SysError("stat of", path, errno);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < kHeaderRegion) {
    return Status::Corruption(path + " is " + std::to_string(size) +
                              " bytes, shorter than its 4096-byte header");
  }
  std::array<std::uint8_t, kHeaderRegion> header{};
  S3ORAM_RETURN_IF_ERROR(PreadAll(impl->fd.get(), header.data(), header.size(), 0, path));

  S3ORAM_ASSIGN_OR_RETURN(MetaCopy current, PickMetaCopy(header.data(), path));
  const ServerMeta& best = current.meta;
  impl->seed = current.seed;
  std::string shape_why;
  if (!ComputeGeometry(best.shape, &impl->geo, &shape_why)) {
    return Status::Corruption(path + ": header describes an impossible shape: " + shape_why);
  }
  impl->generation = current.generation;
  impl->SetIdentityPlaces();
  S3ORAM_RETURN_IF_ERROR(impl->CheckSizeAndUpgrade(best, current.version, size));
  // Upgraded now (or format 3 already): a shadow an older server sealed moves
  // to where this one keeps shadows.
  S3ORAM_RETURN_IF_ERROR(impl->MoveOlderShadow(best));
  S3ORAM_RETURN_IF_ERROR(impl->Map(path));
  S3ORAM_RETURN_IF_ERROR(impl->LoadSealedShadow(best));
  S3ORAM_RETURN_IF_ERROR(impl->LoadRootSnapshot(best));
  if (cut_catch_up) S3ORAM_RETURN_IF_ERROR(impl->EnterCatchUp());

  std::unique_ptr<ShareStore> store(new ShareStore());
  store->impl_ = std::move(impl);
  store->meta_ = best;
  return store;
}

Status LiveTree::UpdateMeta(const ServerMeta& meta) {
  ShareStore::Impl& im = *s_.impl_;
  S3ORAM_RETURN_IF_ERROR(im.Live());
  if (!(meta.shape == s_.meta_.shape)) {
    return Status::InvalidArgument("UpdateMeta cannot change the store shape (" +
                                   ShapeText(s_.meta_.shape) + " -> " + ShapeText(meta.shape) +
                                   "); create a new store");
  }
  if (meta.applied_evictions != s_.meta_.applied_evictions) {
    // Only Commit moves it, with the bucket map that goes with it.
    return Status::InvalidArgument("UpdateMeta cannot change the evictions applied");
  }
  S3ORAM_RETURN_IF_ERROR(im.WriteMeta(meta));
  s_.meta_ = meta;
  return Status::Ok();
}

Status LiveTree::ReadBuckets(std::uint64_t first, std::uint64_t count, std::span<Elem> out) const {
  const ShareStore::Impl& im = *s_.impl_;
  const std::uint64_t n = im.geo.num_buckets;
  if (first < 1 || count == 0 || first > n || count > n - first + 1 ||
      out.size() != count * bucket_elems()) {
    return Status::InvalidArgument("ReadBuckets: range or buffer size out of range");
  }
  // One read per run of buckets whose places follow each other (all of them
  // until the first eviction, most of them after).
  const std::uint64_t be = bucket_elems();
  for (std::uint64_t i = 0; i < count;) {
    std::uint64_t run = 1;
    while (i + run < count && im.places[first + i + run] == im.places[first + i] + run &&
           im.places[first + i + run] != im.geo.num_buckets + 1) {
      ++run;
    }
    S3ORAM_RETURN_IF_ERROR(PreadAll(im.fd.get(), out.data() + i * be, run * im.geo.bucket_bytes,
                                    im.BucketOffset(first + i), im.shares_path));
    i += run;
  }
  return Status::Ok();
}

Result<std::vector<bool>> LiveTree::Holes(std::uint64_t first, std::uint64_t count) const {
  return s_.impl_->Holes(first, count);
}

Status LiveTree::WriteSlot(std::uint64_t bucket, std::uint32_t slot, std::span<const Elem> data,
                           std::uint64_t seq, std::uint64_t epoch,
                           const std::function<Status()>& while_syncing) {
  ShareStore::Impl& im = *s_.impl_;
  S3ORAM_RETURN_IF_ERROR(im.Live());
  if (bucket < 1 || bucket > im.geo.num_buckets) {
    return Status::InvalidArgument("bucket " + std::to_string(bucket) + " out of range 1.." +
                                   std::to_string(im.geo.num_buckets));
  }
  if (slot >= s_.meta_.shape.bucket_size) {
    return Status::InvalidArgument("slot " + std::to_string(slot) + " out of range 0.." +
                                   std::to_string(s_.meta_.shape.bucket_size - 1));
  }
  if (data.size() != slot_elems()) {
    return Status::InvalidArgument("slot data has " + std::to_string(data.size()) +
                                   " elements, expected " + std::to_string(slot_elems()));
  }
  const std::uint64_t off =
      im.BucketOffset(bucket) + std::uint64_t{slot} * slot_elems() * sizeof(Elem);
  digest::SlotDigest digest{};
  if (!im.key->Digest(data, &digest)) {
    return Status::InvalidArgument("slot data hold an element that is not a field element");
  }
  // Data and header, then one fdatasync for both: the write is acknowledged
  // only after it, so an acknowledged write is durable with its seq and epoch.
  // A power loss before the sync completes may persist the header without the
  // slot (the kernel writes pages back in any order). That is safe: the write
  // was not acknowledged, so its client repairs slot nr before any retrieval
  // (docs/ARCHITECTURE.md §8), and a header seq or epoch ahead of the data only
  // makes Open's seq, fencing and the restore check more conservative. One
  // sync instead of two (data, then header) halves the disk flushes of every
  // access.
  // The digest rides in the same sync; torn against its slot by a power loss,
  // it is repaired with the slot (the client rewrites slot nr in full).
  S3ORAM_RETURN_IF_ERROR(
      PwriteAll(im.fd.get(), data.data(), data.size_bytes(), off, im.shares_path));
  S3ORAM_RETURN_IF_ERROR(
      im.WriteDigests(im.fd.get(), im.shares_path, im.DigestOffset(bucket, slot), {&digest, 1}));
  FaultPoint("server.write_root.after_data");
  ServerMeta m = s_.meta_;
  m.applied_seq = std::max(m.applied_seq, seq);
  m.epoch = std::max(m.epoch, epoch);
  S3ORAM_RETURN_IF_ERROR(im.WriteMeta(m, /*sync_now=*/false));
  if (while_syncing) {
    // The store's meta_ changes only after both finished, so `while_syncing` sees the
    // header as it was (the new slot is in the page cache already).
    // The flush thread only syncs; the store's failure record is written here,
    // after the join, so nothing else in the store is shared with it.
    auto sync = std::async(std::launch::async, [&im] {
      return im.sync ? DataSync(im.fd.get(), im.shares_path) : Status::Ok();
    });
    Status during = while_syncing();
    Status synced = sync.get();
    if (!synced.ok()) {
      im.SetFailure(synced.message());
      return synced;
    }
    s_.meta_ = m;
    return during;
  }
  S3ORAM_RETURN_IF_ERROR(im.Sync(im.fd.get(), im.shares_path));
  s_.meta_ = m;
  return Status::Ok();
}

}  // namespace s3oram::serverd

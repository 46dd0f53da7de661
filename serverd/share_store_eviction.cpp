// EvictionShadow (store_shadow.h): the shadow (begin, put, seal, and its check
// by EVICT_CHECK), the root snapshot the PREPARE reads, and Commit (the bucket
// map switched, the header last).
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

Status EvictionShadow::BeginShadow(std::uint64_t eviction, std::uint32_t attempt,
                                   std::span<const std::uint64_t> buckets) {
  ShareStore::Impl& im = *s_.impl_;
  S3ORAM_RETURN_IF_ERROR(im.Live());
  if (eviction != s_.meta_.applied_evictions) {
    return Status::FailedPrecondition("cannot prepare eviction " + std::to_string(eviction) +
                                      ": the store has applied " +
                                      std::to_string(s_.meta_.applied_evictions) + " evictions");
  }
  if (buckets.empty() || buckets.size() > im.geo.spare) {
    return Status::InvalidArgument("shadow bucket list has " + std::to_string(buckets.size()) +
                                   " entries, expected 1.." + std::to_string(im.geo.spare) +
                                   " (the spare places)");
  }
  std::unordered_set<std::uint64_t> seen;
  for (std::uint64_t b : buckets) {
    if (b < 1 || b > im.geo.num_buckets) {
      return Status::InvalidArgument("shadow bucket " + std::to_string(b) + " out of range 1.." +
                                     std::to_string(im.geo.num_buckets));
    }
    if (!seen.insert(b).second) {
      return Status::InvalidArgument("shadow bucket " + std::to_string(b) + " listed twice");
    }
  }
  if (!im.shadow_fd.valid()) {
    im.shadow_fd = Fd(::open(im.shadow_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!im.shadow_fd.valid()) return SysError("creating", im.shadow_path, errno);
  }
  // Forget the previous shadow before touching the file: if anything below
  // fails, no shadow (old or new) may be committed.
  im.SetShadowState(ShadowState::kNone);

  ShadowHeader h;
  h.sealed = false;
  h.fs_id = s_.meta_.fs_id;
  h.shape = s_.meta_.shape;
  h.attempt = attempt;
  h.eviction = eviction;
  h.buckets.assign(buckets.begin(), buckets.end());
  h.data_offset = ShadowDataOffset(buckets.size());
  const int sfd = im.shadow_fd.get();
  // Unsealed header first and durable, so an older sealed header is gone
  // before its data starts being overwritten.
  std::vector<std::uint8_t> enc = EncodeShadowHeader(h);
  S3ORAM_RETURN_IF_ERROR(PwriteAll(sfd, enc.data(), enc.size(), 0, im.shadow_path));
  S3ORAM_RETURN_IF_ERROR(im.Sync(sfd, im.shadow_path));
  // shadow.bin is a header only (a format-2 one also held the data).
  while (::ftruncate(sfd, static_cast<off_t>(h.data_offset)) != 0) {
    if (errno == EINTR) continue;
    return SysError("sizing", im.shadow_path, errno);
  }
  // The shadow goes to the free places, whatever an earlier attempt left
  // there. Their space is reserved now so that a full disk fails here, not
  // halfway through the puts (a place freed by a commit is allocated
  // already; a spare one may still be a hole). Filesystems without
  // fallocate just allocate on write.
  std::vector<std::uint32_t> free = im.FreePlaces();
  free.resize(buckets.size());
  for (const std::uint32_t q : free) {
    int rc;
    while ((rc = ::fallocate(im.fd.get(), 0, static_cast<off_t>(im.PlaceOffset(q)),
                             static_cast<off_t>(im.geo.bucket_bytes))) != 0 &&
           errno == EINTR) {
    }
    if (rc != 0 && errno != EOPNOTSUPP) return SysError("allocating", im.shares_path, errno);
  }

  im.shadow = std::move(h);
  im.shadow_places = std::move(free);
  im.shadow_filled.assign(buckets.size(), false);
  im.shadow_digests.assign(buckets.size() * im.geo.z, digest::SlotDigest{});
  im.SetShadowState(ShadowState::kOpen);
  return Status::Ok();
}

Status EvictionShadow::PutShadowBucket(std::size_t i, std::span<const Elem> data,
                                       std::span<const digest::SlotDigest> digests) {
  ShareStore::Impl& im = *s_.impl_;
  S3ORAM_RETURN_IF_ERROR(im.Usable());
  if (im.shadow_state != ShadowState::kOpen) {
    return Status::FailedPrecondition("no shadow is being written (call BeginShadow first)");
  }
  if (i >= im.shadow.buckets.size()) {
    return Status::InvalidArgument("shadow bucket index " + std::to_string(i) +
                                   " out of range 0.." +
                                   std::to_string(im.shadow.buckets.size() - 1));
  }
  if (data.size() != bucket_elems()) {
    return Status::InvalidArgument("shadow bucket data has " + std::to_string(data.size()) +
                                   " elements, expected " + std::to_string(bucket_elems()));
  }
  const auto mine = std::span(im.shadow_digests).subspan(i * im.geo.z, im.geo.z);
  if (digests.empty()) {
    S3ORAM_RETURN_IF_ERROR(im.DigestBuckets(data, mine, "eviction output"));
  } else if (digests.size() != im.geo.z) {
    return Status::InvalidArgument("shadow bucket digests: " + std::to_string(digests.size()) +
                                   ", expected " + std::to_string(im.geo.z));
  } else {
    std::copy(digests.begin(), digests.end(), mine.begin());
  }
  S3ORAM_RETURN_IF_ERROR(PwriteAll(im.fd.get(), data.data(), data.size_bytes(),
                                   im.PlaceOffset(im.shadow_places[i]), im.shares_path));
  im.shadow_filled[i] = true;
  return Status::Ok();
}

std::span<const digest::SlotDigest> EvictionShadow::ShadowBucketDigests(std::size_t i) const {
  const ShareStore::Impl& im = *s_.impl_;
  assert(i < im.shadow.buckets.size() && "shadow bucket index out of range; callers validate");
  return std::span<const digest::SlotDigest>(im.shadow_digests).subspan(i * im.geo.z, im.geo.z);
}

Status EvictionShadow::SealShadow() {
  ShareStore::Impl& im = *s_.impl_;
  S3ORAM_RETURN_IF_ERROR(im.Usable());
  if (im.shadow_state == ShadowState::kSealed) return Status::Ok();
  if (im.shadow_state != ShadowState::kOpen) {
    return Status::FailedPrecondition("no shadow to seal (call BeginShadow first)");
  }
  // An unwritten bucket would read as zeros, which is a valid sharing of an
  // empty bucket: committing it would silently drop blocks.
  for (std::size_t i = 0; i < im.shadow_filled.size(); ++i) {
    if (!im.shadow_filled[i]) {
      return Status::FailedPrecondition(
          "cannot seal shadow of eviction " + std::to_string(im.shadow.eviction) +
          ": bucket index " + std::to_string(i) + " (bucket " +
          std::to_string(im.shadow.buckets[i]) + ") was never written");
    }
  }
  // Data and digests durable in the free places, then the sealed header.
  for (std::size_t i = 0; i < im.shadow_places.size(); ++i) {
    S3ORAM_RETURN_IF_ERROR(im.WriteDigests(
        im.fd.get(), im.shares_path, im.PlaceDigestOffset(im.shadow_places[i]),
        std::span<const digest::SlotDigest>(im.shadow_digests).subspan(i * im.geo.z, im.geo.z)));
  }
  S3ORAM_RETURN_IF_ERROR(im.Sync(im.fd.get(), im.shares_path));
  const int sfd = im.shadow_fd.get();
  ShadowHeader sealed = im.shadow;
  sealed.sealed = true;
  std::vector<std::uint8_t> enc = EncodeShadowHeader(sealed);
  S3ORAM_RETURN_IF_ERROR(PwriteAll(sfd, enc.data(), enc.size(), 0, im.shadow_path));
  S3ORAM_RETURN_IF_ERROR(im.Sync(sfd, im.shadow_path));
  im.shadow.sealed = true;
  im.SetShadowState(ShadowState::kSealed);
  return Status::Ok();
}

Status ShareStore::Impl::WriteRootFile(const wire::FsId& fs_id, std::uint64_t eviction,
                                       const Elem* data, std::vector<digest::SlotDigest> digests) {
  if (!root_fd.valid()) {
    root_fd = Fd(::open(root_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!root_fd.valid()) return SysError("creating", root_path, errno);
  }
  const int rfd = root_fd.get();
  // No snapshot from here until the new one is complete.
  root_snapshot = 0;
  RootHeader h;
  h.fs_id = fs_id;
  h.eviction = eviction;
  h.bucket_bytes = geo.bucket_bytes;
  h.z = static_cast<std::uint32_t>(geo.z);
  auto enc = EncodeRootHeader(h);
  S3ORAM_RETURN_IF_ERROR(PwriteAll(rfd, enc.data(), enc.size(), 0, root_path));
  S3ORAM_RETURN_IF_ERROR(Sync(rfd, root_path));
  S3ORAM_RETURN_IF_ERROR(PwriteAll(rfd, data, geo.bucket_bytes, kHeaderRegion, root_path));
  S3ORAM_RETURN_IF_ERROR(WriteDigests(rfd, root_path, kHeaderRegion + geo.bucket_bytes, digests));
  S3ORAM_RETURN_IF_ERROR(Sync(rfd, root_path));
  FaultPoint("server.snapshot_root.before_complete");
  h.complete = true;
  enc = EncodeRootHeader(h);
  S3ORAM_RETURN_IF_ERROR(PwriteAll(rfd, enc.data(), enc.size(), 0, root_path));
  S3ORAM_RETURN_IF_ERROR(Sync(rfd, root_path));
  root_digests = std::move(digests);
  root_snapshot = eviction + 1;
  return Status::Ok();
}

Status EvictionShadow::SnapshotRoot(std::uint64_t eviction) {
  ShareStore::Impl& im = *s_.impl_;
  S3ORAM_RETURN_IF_ERROR(im.Live());
  if (eviction != s_.meta_.applied_evictions) {
    return Status::FailedPrecondition("cannot snapshot the root for eviction " +
                                      std::to_string(eviction) + ": the store has applied " +
                                      std::to_string(s_.meta_.applied_evictions) + " evictions");
  }
  if (im.root_snapshot == eviction + 1) return Status::Ok();
  // The live root is checked before it is copied: damage must not move into
  // the snapshot under a fresh digest (the stored digests go with it).
  const auto* root = reinterpret_cast<const Elem*>(im.map + im.BucketOffset(1));
  S3ORAM_RETURN_IF_ERROR(s_.tree_.VerifyBuckets(1, {root, bucket_elems()}));
  return im.WriteRootFile(s_.meta_.fs_id, eviction, root,
                          {im.StoredDigests(1), im.StoredDigests(1) + im.geo.z});
}

std::uint64_t EvictionShadow::RootSnapshotEviction() const { return s_.impl_->root_snapshot; }

Status EvictionShadow::ReadRootSnapshot(std::uint64_t eviction, std::span<Elem> out) const {
  const ShareStore::Impl& im = *s_.impl_;
  if (im.root_snapshot != eviction + 1) {
    return Status::FailedPrecondition("no root snapshot for eviction " + std::to_string(eviction));
  }
  if (out.size() != bucket_elems()) {
    return Status::InvalidArgument("root snapshot buffer has " + std::to_string(out.size()) +
                                   " elements, expected " + std::to_string(bucket_elems()));
  }
  S3ORAM_RETURN_IF_ERROR(
      PreadAll(im.root_fd.get(), out.data(), out.size_bytes(), kHeaderRegion, im.root_path));
  std::vector<digest::SlotDigest> got(im.geo.z);
  const std::size_t bad = im.key->DigestBucket(out, got);
  for (std::size_t q = 0; q < im.geo.z; ++q) {
    if (q == bad || got[q] != im.root_digests[q]) {
      return Status::Damaged("server " + std::to_string(s_.meta_.server_index) + ": slot " +
                             std::to_string(q) + " of the root snapshot in " + im.root_path +
                             " does not match its digest (the disk changed it); the eviction "
                             "cannot run until the server is rebuilt (s3oram rebuild)");
    }
  }
  return Status::Ok();
}

std::span<const digest::SlotDigest> EvictionShadow::RootSnapshotDigests() const {
  return s_.impl_->root_digests;
}

std::uint64_t EvictionShadow::SealedEviction() const {
  const ShareStore::Impl& im = *s_.impl_;
  if (im.shadow_state != ShadowState::kSealed) return 0;
  return im.shadow.eviction + 1;
}

Status EvictionShadow::Commit(std::uint64_t eviction, std::uint64_t seq, std::uint64_t epoch) {
  ShareStore::Impl& im = *s_.impl_;
  // Already applied (possibly by a commit whose reply was lost): nothing to do.
  if (eviction < s_.meta_.applied_evictions) return Status::Ok();
  S3ORAM_RETURN_IF_ERROR(im.Live());
  if (im.shadow_state != ShadowState::kSealed || im.shadow.eviction != eviction) {
    std::string have =
        im.shadow_state == ShadowState::kSealed
            ? "the sealed shadow is for eviction " + std::to_string(im.shadow.eviction)
            : "no shadow is sealed";
    return Status::FailedPrecondition("cannot commit eviction " + std::to_string(eviction) + ": " +
                                      have);
  }
  // BeginShadow and Open only admit a shadow for the next eviction.
  assert(eviction == s_.meta_.applied_evictions);

  // Every shadow slot is checked against its digest before the commit: a
  // shadow damaged on disk since Seal fails it while the live tree is still
  // the previous one, whole. Then the bucket map that puts each shadow
  // bucket in place of its live one is written (the copy Open reads for
  // eviction + 1, never the one it reads now) and made durable, and the
  // header records the eviction: nothing is copied. Re-running this after a
  // crash is harmless: the shadow is unchanged, and the map is written again.
  // The check is skipped when ShadowDigests (EVICT_CHECK) verified this very
  // shadow in this process moments ago: after a restart, or without
  // EVICT_CHECK, it runs. (Damage between the two is caught as any damage of
  // the live tree is, at the next read of those slots.)
  const std::size_t m_elems = slot_elems();
  if (!im.shadow_verified) {
    std::vector<Elem> buf(bucket_elems());
    for (std::size_t i = 0; i < im.shadow.buckets.size(); ++i) {
      S3ORAM_RETURN_IF_ERROR(PreadAll(im.fd.get(), buf.data(), im.geo.bucket_bytes,
                                      im.PlaceOffset(im.shadow_places[i]), im.shares_path));
      const digest::SlotDigest* want = im.shadow_digests.data() + i * im.geo.z;
      for (std::uint64_t k = 0; k < im.geo.z; ++k) {
        digest::SlotDigest got{};
        if (!im.key->Digest({buf.data() + k * m_elems, m_elems}, &got) || got != want[k]) {
          return Status::Damaged(
              "server " + std::to_string(s_.meta_.server_index) + ": the prepared eviction " +
              std::to_string(eviction) + " in " + im.shares_path + " is damaged (bucket " +
              std::to_string(im.shadow.buckets[i]) + " slot " + std::to_string(k) +
              " differs from what was written); it was not committed. This server must be "
              "repaired from the others: s3oram rebuild --server " +
              std::to_string(s_.meta_.server_index));
        }
      }
    }
  }
  std::vector<std::uint32_t> next = im.places;
  for (std::size_t i = 0; i < im.shadow.buckets.size(); ++i) {
    next[im.shadow.buckets[i]] = im.shadow_places[i];
  }
  S3ORAM_RETURN_IF_ERROR(im.WriteMapCopy(eviction + 1, next));
  S3ORAM_RETURN_IF_ERROR(im.Sync(im.fd.get(), im.shares_path));
  FaultPoint("server.evict_commit.after_map");
  ServerMeta m = s_.meta_;
  m.applied_evictions = eviction + 1;
  m.applied_seq = std::max(m.applied_seq, seq);
  m.epoch = std::max(m.epoch, epoch);
  S3ORAM_RETURN_IF_ERROR(im.WriteMeta(m));
  s_.meta_ = m;
  im.places = std::move(next);
  // The shadow header stays; its eviction is now below applied_evictions,
  // so Open ignores it and the next BeginShadow overwrites it. The places
  // the old buckets held are the free ones now.
  im.SetShadowState(ShadowState::kNone);
  return Status::Ok();
}

Result<std::vector<digest::SlotDigest>> EvictionShadow::ShadowDigests(
    std::uint64_t eviction, std::uint32_t attempt, const digest::DigestKey& public_key,
    const digest::Seed& combination_seed, std::size_t combination_rows,
    std::vector<Elem>* combination) const {
  const ShareStore::Impl& im = *s_.impl_;
  if (im.shadow_state != ShadowState::kSealed || im.shadow.eviction != eviction ||
      im.shadow.attempt != attempt) {
    return Status::FailedPrecondition("no sealed shadow of eviction " + std::to_string(eviction) +
                                      " attempt " + std::to_string(attempt) + " to check" +
                                      (im.shadow_state == ShadowState::kSealed
                                           ? " (the sealed one is eviction " +
                                                 std::to_string(im.shadow.eviction) + " attempt " +
                                                 std::to_string(im.shadow.attempt) + ")"
                                           : std::string()));
  }
  if (public_key.slot_elems() != slot_elems()) {
    return Status::InvalidArgument("ShadowDigests: public key for slots of another size");
  }
  const std::size_t m = slot_elems();
  std::vector<Elem> bucket(bucket_elems());
  const std::size_t slots = im.shadow.buckets.size() * im.geo.z;
  std::vector<digest::SlotDigest> out(slots);
  std::vector<Elem> weights;
  if (combination != nullptr) {
    weights = digest::CombinationWeights(combination_seed, combination_rows, slots);
    combination->assign(combination_rows * m, 0);
  }
  for (std::size_t i = 0; i < im.shadow.buckets.size(); ++i) {
    S3ORAM_RETURN_IF_ERROR(PreadAll(im.fd.get(), bucket.data(), im.geo.bucket_bytes,
                                    im.PlaceOffset(im.shadow_places[i]), im.shares_path));
    const digest::SlotDigest* want = im.shadow_digests.data() + i * im.geo.z;
    for (std::uint64_t slot = 0; slot < im.geo.z; ++slot) {
      const std::span<const Elem> x{bucket.data() + slot * m, m};
      digest::SlotDigest got{};
      if (!im.key->Digest(x, &got) || got != want[slot]) {
        return Status::Damaged(
            "server " + std::to_string(s_.meta_.server_index) + ": the prepared eviction " +
            std::to_string(eviction) + " in " + im.shares_path + " is damaged (bucket " +
            std::to_string(im.shadow.buckets[i]) + " slot " + std::to_string(slot) +
            " differs from what was written); if "
            "it stays, repair this server from the others: s3oram rebuild "
            "--server " +
            std::to_string(s_.meta_.server_index));
      }
      (void)public_key.Digest(x, &out[i * im.geo.z + slot]);
    }
    // Every slot is canonical now (its stored digest matched), as the
    // kernel requires.
    for (std::size_t r = 0; r < combination_rows && combination != nullptr; ++r) {
      digest::AddCombination(
          bucket, m, std::span<const Elem>(weights).subspan(r * slots + i * im.geo.z, im.geo.z),
          std::span<Elem>(*combination).subspan(r * m, m));
    }
  }
  im.shadow_verified = true;
  return out;
}

}  // namespace s3oram::serverd

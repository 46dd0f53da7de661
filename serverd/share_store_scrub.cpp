// The slot digests and their checks: the LiveTree's verification of bucket
// reads (store_tree.h), and StoreScrub (store_scrub.h), the checks of a range
// of the tree or of the root snapshot for SCRUB, PARITY and SLOT_SHARE.
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

Status LiveTree::VerifyBuckets(std::uint64_t first, std::span<const Elem> data) const {
  const ShareStore::Impl& im = *s_.impl_;
  const std::uint64_t be = bucket_elems();
  const std::uint64_t n = im.geo.num_buckets;
  if (first < 1 || first > n || data.empty() || data.size() % be != 0 ||
      data.size() / be > n - first + 1) {
    return Status::InvalidArgument("VerifyBuckets: range or data size out of range");
  }
  const std::size_t m = slot_elems();
  for (std::uint64_t i = 0; i < data.size() / be; ++i) {
    const std::uint64_t b = first + i;
    const digest::SlotDigest* want = im.StoredDigests(b);
    for (std::uint64_t slot = 0; slot < im.geo.z; ++slot) {
      digest::SlotDigest got{};
      if (!im.key->Digest(data.subspan(i * be + slot * m, m), &got) || got != want[slot]) {
        return DamagedSlot(b, slot, "its content does not match its digest");
      }
    }
  }
  return Status::Ok();
}

Result<std::vector<std::uint8_t>> StoreScrub::Scrub(std::uint64_t first,
                                                    std::uint64_t count) const {
  return Scrub(first, count, *s_.impl_->key, nullptr);
}

Result<std::vector<std::uint8_t>> StoreScrub::Scrub(
    std::uint64_t first, std::uint64_t count, const digest::DigestKey& public_key,
    std::vector<digest::SlotDigest>* out_digests) const {
  const ShareStore::Impl& im = *s_.impl_;
  if (out_digests && public_key.slot_elems() != slot_elems()) {
    return Status::InvalidArgument("Scrub: public key for slots of another size");
  }
  const std::uint64_t n = im.geo.num_buckets;
  if (first < 1 || count == 0 || first > n || count > n - first + 1) {
    return Status::InvalidArgument("Scrub: range out of range");
  }
  S3ORAM_ASSIGN_OR_RETURN(std::vector<bool> hole, im.Holes(first, count));
  const std::size_t m = slot_elems();
  std::vector<std::uint8_t> damaged(count * im.geo.z, 0);
  if (out_digests) out_digests->assign(count * im.geo.z, digest::SlotDigest{});
  std::vector<Elem> bucket(bucket_elems());
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t b = first + i;
    const digest::SlotDigest* want = im.StoredDigests(b);
    if (hole[i]) {
      for (std::uint64_t slot = 0; slot < im.geo.z; ++slot) {
        damaged[i * im.geo.z + slot] = want[slot] != digest::SlotDigest{} ? 1 : 0;
      }
      continue;
    }
    S3ORAM_RETURN_IF_ERROR(s_.tree_.ReadBucket(b, bucket));
    for (std::uint64_t slot = 0; slot < im.geo.z; ++slot) {
      const std::span<const Elem> x{bucket.data() + slot * m, m};
      digest::SlotDigest got{};
      const bool ok = im.key->Digest(x, &got) && got == want[slot];
      damaged[i * im.geo.z + slot] = ok ? 0 : 1;
      // A slot with a non-canonical element is damaged; its public digest
      // stays zero (the client skips damaged slots).
      if (out_digests && ok) (void)public_key.Digest(x, &(*out_digests)[i * im.geo.z + slot]);
    }
  }
  return damaged;
}

std::span<const digest::SlotDigest> LiveTree::Digests(std::uint64_t b) const {
  const ShareStore::Impl& im = *s_.impl_;
  assert(b >= 1 && b <= im.geo.num_buckets && "bucket out of range; callers validate");
  return {im.StoredDigests(b), static_cast<std::size_t>(im.geo.z)};
}

const digest::DigestKey& LiveTree::digest_key() const { return *s_.impl_->key; }

Status LiveTree::DamagedSlot(std::uint64_t b, std::uint64_t slot, const std::string& what) const {
  const std::string server = "server " + std::to_string(s_.meta_.server_index);
  return Status::Damaged(server + " has damaged storage: bucket " + std::to_string(b) + " slot " +
                         std::to_string(slot) + " of " + s_.impl_->shares_path + " (" + what +
                         "); this server must be repaired from the others: s3oram rebuild "
                         "--server " +
                         std::to_string(s_.meta_.server_index));
}

bool StoreScrub::HoldsPendingRootSnapshot() const {
  const ShareStore::Impl& im = *s_.impl_;
  return im.root_snapshot != 0 && im.root_snapshot == s_.meta_.applied_evictions + 1;
}

Result<std::vector<std::uint8_t>> StoreScrub::ScrubRootSnapshot(
    const digest::DigestKey* public_key, std::vector<digest::SlotDigest>* out_digests) const {
  const ShareStore::Impl& im = *s_.impl_;
  if (!HoldsPendingRootSnapshot()) {
    return Status::FailedPrecondition("no root snapshot of a pending eviction");
  }
  if (out_digests && (!public_key || public_key->slot_elems() != slot_elems())) {
    return Status::InvalidArgument("ScrubRootSnapshot: public key for slots of another size");
  }
  std::vector<Elem> root(bucket_elems());
  S3ORAM_RETURN_IF_ERROR(PreadAll(im.root_fd.get(), root.data(), root.size() * sizeof(Elem),
                                  kHeaderRegion, im.root_path));
  const std::size_t m = slot_elems();
  std::vector<std::uint8_t> damaged(im.geo.z, 0);
  if (out_digests) out_digests->assign(im.geo.z, digest::SlotDigest{});
  for (std::uint64_t slot = 0; slot < im.geo.z; ++slot) {
    const std::span<const Elem> x{root.data() + slot * m, m};
    digest::SlotDigest got{};
    const bool ok = im.key->Digest(x, &got) && got == im.root_digests[slot];
    damaged[slot] = ok ? 0 : 1;
    if (out_digests && ok) (void)public_key->Digest(x, &(*out_digests)[slot]);
  }
  return damaged;
}

Result<std::vector<Elem>> StoreScrub::RootSnapshotSlot(std::uint32_t slot) const {
  if (!HoldsPendingRootSnapshot()) {
    return Status::NotFound("no root snapshot of a pending eviction");
  }
  if (slot >= s_.impl_->geo.z) return Status::InvalidArgument("root snapshot slot out of range");
  std::vector<Elem> root(bucket_elems());
  S3ORAM_RETURN_IF_ERROR(s_.shadow_.ReadRootSnapshot(s_.meta_.applied_evictions, root));
  const std::size_t m = slot_elems();
  return std::vector<Elem>(root.begin() + static_cast<std::ptrdiff_t>(slot * m),
                           root.begin() + static_cast<std::ptrdiff_t>((slot + 1) * m));
}

}  // namespace s3oram::serverd

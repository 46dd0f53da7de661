// ShareStore: the slot digests and their checks (Scrub, the verification of
// bucket reads, the digests of the shadow).
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

Status ShareStore::VerifyBuckets(std::uint64_t first, std::span<const Elem> data) const {
  const Impl& im = *impl_;
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

Result<std::vector<std::uint8_t>> ShareStore::Scrub(std::uint64_t first,
                                                    std::uint64_t count) const {
  return Scrub(first, count, *impl_->key, nullptr);
}

Result<std::vector<std::uint8_t>> ShareStore::Scrub(
    std::uint64_t first, std::uint64_t count, const digest::DigestKey& public_key,
    std::vector<digest::SlotDigest>* out_digests) const {
  const Impl& im = *impl_;
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
    S3ORAM_RETURN_IF_ERROR(ReadBucket(b, bucket));
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

Result<std::vector<digest::SlotDigest>> ShareStore::ShadowDigests(
    std::uint64_t eviction, std::uint32_t attempt, const digest::DigestKey& public_key,
    const digest::Seed& combination_seed, std::size_t combination_rows,
    std::vector<Elem>* combination) const {
  const Impl& im = *impl_;
  if (im.shadow_state != Impl::ShadowState::kSealed || im.shadow.eviction != eviction ||
      im.shadow.attempt != attempt) {
    return Status::FailedPrecondition("no sealed shadow of eviction " + std::to_string(eviction) +
                                      " attempt " + std::to_string(attempt) + " to check" +
                                      (im.shadow_state == Impl::ShadowState::kSealed
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
            "server " + std::to_string(meta_.server_index) + ": the prepared eviction " +
            std::to_string(eviction) + " in " + im.shares_path + " is damaged (bucket " +
            std::to_string(im.shadow.buckets[i]) + " slot " + std::to_string(slot) +
            " differs from what was written); if "
            "it stays, repair this server from the others: s3oram rebuild "
            "--server " +
            std::to_string(meta_.server_index));
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

std::span<const digest::SlotDigest> ShareStore::Digests(std::uint64_t b) const {
  assert(b >= 1 && b <= impl_->geo.num_buckets && "bucket out of range; callers validate");
  return {impl_->StoredDigests(b), static_cast<std::size_t>(impl_->geo.z)};
}

const digest::DigestKey& ShareStore::digest_key() const { return *impl_->key; }

Status ShareStore::DamagedSlot(std::uint64_t b, std::uint64_t slot, const std::string& what) const {
  const std::string server = "server " + std::to_string(meta_.server_index);
  return Status::Damaged(server + " has damaged storage: bucket " + std::to_string(b) + " slot " +
                         std::to_string(slot) + " of " + impl_->shares_path + " (" + what +
                         "); this server must be repaired from the others: s3oram rebuild "
                         "--server " +
                         std::to_string(meta_.server_index));
}

}  // namespace s3oram::serverd

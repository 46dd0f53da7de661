// StoreInspection (store_inspection.h): the share file seen from outside, its
// size and where a bucket or the shadow lies in it, for STATUS, inspection and
// the damage tests.
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

std::uint64_t StoreInspection::file_bytes() const { return s_.impl_->geo.file_bytes; }
std::uint64_t StoreInspection::allocated_bytes() const {
  struct stat st {};
  if (::fstat(s_.impl_->fd.get(), &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

StoreInspection::FileRange StoreInspection::BucketInFile(std::uint64_t b) const {
  const ShareStore::Impl& im = *s_.impl_;
  assert(b >= 1 && b <= im.geo.num_buckets && "bucket out of range; callers validate");
  return {im.BucketOffset(b), im.DigestOffset(b)};
}

std::vector<StoreInspection::FileRange> StoreInspection::ShadowInFile() const {
  const ShareStore::Impl& im = *s_.impl_;
  std::vector<FileRange> out;
  if (im.shadow_state == ShadowState::kNone) return out;
  for (const std::uint32_t q : im.shadow_places) {
    out.push_back({im.PlaceOffset(q), im.PlaceDigestOffset(q)});
  }
  return out;
}

Result<std::vector<StoreInspection::FileRange>> StoreInspection::InspectFile(
    const std::string& shares_path, std::vector<FileRange>* places) {
  Fd fd(::open(shares_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return SysError("opening", shares_path, errno);
  std::array<std::uint8_t, kHeaderRegion> header{};
  S3ORAM_RETURN_IF_ERROR(PreadAll(fd.get(), header.data(), header.size(), 0, shares_path));
  ServerMeta best;
  std::uint32_t best_version = 0;
  std::uint64_t best_gen = 0;
  bool found = false;
  for (int c = 0; c < 2; ++c) {
    ServerMeta m;
    digest::Seed seed{};
    std::uint32_t version = 0;
    std::uint64_t gen = 0;
    std::string why;
    if (DecodeMeta(header.data() + c * kMetaCopyBytes, &m, &seed, &version, &gen, &why) &&
        (!found || gen > best_gen)) {
      best = m;
      best_version = version;
      best_gen = gen;
      found = true;
    }
  }
  if (!found) return Status::Corruption(shares_path + ": no valid header copy");
  ShareStore::Impl im;
  im.shares_path = shares_path;
  std::string why;
  if (!ComputeGeometry(best.shape, &im.geo, &why))
    return Status::Corruption(shares_path + ": " + why);
  im.SetIdentityPlaces();
  if (best_version == kMetaVersion) {
    im.fd = std::move(fd);
    S3ORAM_RETURN_IF_ERROR(im.ReadMapCopy(best.applied_evictions));
  }
  std::vector<FileRange> out(im.geo.num_buckets + 1);
  for (std::uint64_t b = 1; b <= im.geo.num_buckets; ++b) {
    out[b] = {im.BucketOffset(b), im.DigestOffset(b)};
  }
  if (places != nullptr) {
    places->clear();
    // Files of an older format have no spare places.
    const std::uint64_t n = im.geo.num_buckets + (best_version == kMetaVersion ? im.geo.spare : 0);
    for (std::uint64_t q = 1; q <= n; ++q) {
      places->push_back({im.PlaceOffset(q), im.PlaceDigestOffset(q)});
    }
  }
  return out;
}

}  // namespace s3oram::serverd

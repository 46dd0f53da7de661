// The share store's byte formats: encoding, decoding and checking of the
// records share_store_format.h describes, and the system-call wrappers.
#include "serverd/share_store_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <system_error>

namespace s3oram::serverd::store_format {

void PutU32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

void PutU64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

std::uint32_t GetU32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

std::uint64_t GetU64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

std::string ErrnoText(int e) { return std::error_code(e, std::generic_category()).message(); }

Status SysError(const std::string& what, const std::string& path, int e) {
  if (e == ENOSPC || e == EDQUOT) return Status::NoSpace(what + " " + path + ": " + ErrnoText(e));
  return Status::IoError(what + " " + path + ": " + ErrnoText(e));
}

Status PwriteAll(int fd, const void* buf, std::size_t n, std::uint64_t off,
                 const std::string& path) {
  const auto* p = static_cast<const std::uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::pwrite(fd, p, std::min(n, kMaxIo), static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return SysError("writing", path, errno);
    }
    if (r == 0) return Status::IoError("writing " + path + ": write made no progress");
    p += r;
    n -= static_cast<std::size_t>(r);
    off += static_cast<std::uint64_t>(r);
  }
  return Status::Ok();
}

Status PreadAll(int fd, void* buf, std::size_t n, std::uint64_t off, const std::string& path) {
  auto* p = static_cast<std::uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, std::min(n, kMaxIo), static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return SysError("reading", path, errno);
    }
    if (r == 0) {
      return Status::Corruption("reading " + path + ": file ends at offset " + std::to_string(off) +
                                ", " + std::to_string(n) + " more bytes expected");
    }
    p += r;
    n -= static_cast<std::size_t>(r);
    off += static_cast<std::uint64_t>(r);
  }
  return Status::Ok();
}

Status DataSync(int fd, const std::string& path) {
  while (::fdatasync(fd) != 0) {
    if (errno == EINTR) continue;
    return SysError("fdatasync of", path, errno);
  }
  return Status::Ok();
}

Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return Status::InvalidArgument("empty data directory path");
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    std::string prefix = dir.substr(0, pos);
    if (prefix.empty()) continue;
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return SysError("creating directory", prefix, errno);
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return SysError("stat of", dir, errno);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(dir + " exists and is not a directory");
  return Status::Ok();
}

std::string ShapeText(const wire::StoreShape& s) {
  return "H=" + std::to_string(s.height) + " Z=" + std::to_string(s.bucket_size) +
         " m=" + std::to_string(s.elems_per_slot);
}

bool ComputeGeometry(const wire::StoreShape& s, Geometry* g, std::string* why) {
  if (s.height > kMaxHeight) {
    *why = "height " + std::to_string(s.height) + " exceeds " + std::to_string(kMaxHeight);
    return false;
  }
  if (s.bucket_size < 1) {
    *why = "bucket size Z must be at least 1";
    return false;
  }
  if (s.elems_per_slot < 1) {
    *why = "elements per slot m must be at least 1";
    return false;
  }
  std::uint64_t bucket_bytes = 0;
  std::uint64_t data_bytes = 0;
  std::uint64_t v1_file_bytes = 0;
  std::uint64_t digest_offset = 0;
  std::uint64_t digest_region = 0;
  std::uint64_t file_bytes = 0;
  const std::uint64_t num_buckets = (std::uint64_t{1} << (s.height + 1)) - 1;
  const std::uint64_t slots = num_buckets * s.bucket_size;  // < 2^41 * 2^32: no overflow
  if (__builtin_mul_overflow(std::uint64_t{s.bucket_size}, std::uint64_t{s.elems_per_slot},
                             &bucket_bytes) ||
      __builtin_mul_overflow(bucket_bytes, std::uint64_t{sizeof(Elem)}, &bucket_bytes) ||
      __builtin_mul_overflow(bucket_bytes, num_buckets, &data_bytes) ||
      __builtin_add_overflow(data_bytes, kHeaderRegion, &v1_file_bytes) ||
      __builtin_add_overflow(v1_file_bytes, kHeaderRegion - 1, &digest_offset) ||
      __builtin_mul_overflow(slots, kDigestBytes, &digest_region) ||
      __builtin_add_overflow(digest_offset / kHeaderRegion * kHeaderRegion, digest_region,
                             &file_bytes) ||
      file_bytes > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max())) {
    *why = "share file size overflows (" + ShapeText(s) + ")";
    return false;
  }
  digest_offset = digest_offset / kHeaderRegion * kHeaderRegion;
  // Format 3 appends the spare places, their digests and the bucket map.
  // Bounded by the off_t check above (sizes are at most 2^41 buckets of
  // well under 2^63 / 2^41 bytes), so none of these sums overflow except
  // through the final size, which is checked again.
  const std::uint64_t spare = 2 * std::max<std::uint64_t>(s.height, 1);
  auto page_up = [](std::uint64_t x) {
    return (x + kHeaderRegion - 1) / kHeaderRegion * kHeaderRegion;
  };
  const std::uint64_t v2_file_bytes = file_bytes;
  if (num_buckets + spare > std::numeric_limits<std::uint32_t>::max()) {
    *why = "too many buckets for the bucket map (" + ShapeText(s) + ")";
    return false;
  }
  // Each sum checked: a spare region larger than the tree (H = 0: two places
  // for one bucket) could otherwise wrap past 2^64 below the off_t bound.
  constexpr auto kMaxOff = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
  const std::uint64_t map_copy_bytes = page_up(kMapFixedBytes + 4 * num_buckets + 4);
  std::uint64_t spare_bytes = 0, spare_digest_bytes = 0, spare_end = 0, spare_digest_end = 0;
  std::uint64_t v3_file_bytes = 0;
  const std::uint64_t spare_offset = page_up(v2_file_bytes);  // v2_file_bytes <= kMaxOff
  if (__builtin_mul_overflow(spare, bucket_bytes, &spare_bytes) ||
      __builtin_mul_overflow(spare * s.bucket_size, kDigestBytes, &spare_digest_bytes) ||
      __builtin_add_overflow(spare_offset, spare_bytes, &spare_end) || spare_end > kMaxOff ||
      __builtin_add_overflow(page_up(spare_end), spare_digest_bytes, &spare_digest_end) ||
      spare_digest_end > kMaxOff ||
      __builtin_add_overflow(page_up(spare_digest_end), 2 * map_copy_bytes, &v3_file_bytes) ||
      v3_file_bytes > kMaxOff) {
    *why = "share file size overflows (" + ShapeText(s) + ")";
    return false;
  }
  const std::uint64_t spare_digest_offset = page_up(spare_end);
  const std::uint64_t map_offset = page_up(spare_digest_end);
  *g = Geometry{bucket_bytes,  num_buckets,   s.bucket_size,       slots,      digest_offset,
                spare,         spare_offset,  spare_digest_offset, map_offset, map_copy_bytes,
                v3_file_bytes, v2_file_bytes, v1_file_bytes};
  return true;
}

void EncodeMeta(const ServerMeta& m, const digest::Seed& seed, std::uint64_t generation,
                std::uint8_t* rec) {
  std::memset(rec, 0, kMetaCopyBytes);
  std::memcpy(rec, kMetaMagic.data(), kMetaMagic.size());
  PutU32(rec + 8, kMetaVersion);
  PutU32(rec + 12, kMetaRecordBytes);
  PutU64(rec + 16, generation);
  std::memcpy(rec + 24, m.fs_id.data(), m.fs_id.size());
  PutU32(rec + 40, m.server_index);
  PutU32(rec + 44, m.shape.height);
  PutU32(rec + 48, m.shape.bucket_size);
  PutU32(rec + 52, m.shape.elems_per_slot);
  PutU64(rec + 56, m.epoch);
  PutU64(rec + 64, m.applied_seq);
  PutU64(rec + 72, m.applied_evictions);
  std::memcpy(rec + 80, seed.data(), seed.size());
  PutU32(rec + 112, Crc32c(rec, 112));
}

bool DecodeMeta(const std::uint8_t* rec, ServerMeta* m, digest::Seed* seed, std::uint32_t* version,
                std::uint64_t* generation, std::string* why) {
  if (std::memcmp(rec, kMetaMagic.data(), kMetaMagic.size()) != 0) {
    *why = "bad magic";
    return false;
  }
  // The record length says where the CRC is; a length no format uses is a
  // torn or foreign record, reported as a checksum failure like any other.
  const std::uint32_t length = GetU32(rec + 12);
  if ((length != kMetaRecordBytes && length != kMetaRecordBytes1) ||
      GetU32(rec + length - 4) != Crc32c(rec, length - 4)) {
    *why = "checksum mismatch";
    return false;
  }
  // Checked after the CRC so that a torn record is reported as such, not as a
  // record from a newer version.
  *version = GetU32(rec + 8);
  if (!((*version == kMetaVersion || *version == kMetaVersion2) && length == kMetaRecordBytes) &&
      !(*version == kMetaVersion1 && length == kMetaRecordBytes1)) {
    *why = "unsupported format version " + std::to_string(*version);
    return false;
  }
  if (*version != kMetaVersion1) {
    std::memcpy(seed->data(), rec + 80, seed->size());
  } else {
    seed->fill(0);
  }
  *generation = GetU64(rec + 16);
  std::memcpy(m->fs_id.data(), rec + 24, m->fs_id.size());
  m->server_index = GetU32(rec + 40);
  m->shape.height = GetU32(rec + 44);
  m->shape.bucket_size = GetU32(rec + 48);
  m->shape.elems_per_slot = GetU32(rec + 52);
  m->epoch = GetU64(rec + 56);
  m->applied_seq = GetU64(rec + 64);
  m->applied_evictions = GetU64(rec + 72);
  return true;
}

std::array<std::uint8_t, kRootHeaderBytes> EncodeRootHeader(const RootHeader& h) {
  std::array<std::uint8_t, kRootHeaderBytes> out{};
  std::uint8_t* p = out.data();
  std::memcpy(p, kRootMagic.data(), kRootMagic.size());
  PutU32(p + 8, kRootVersion);
  PutU32(p + 12, h.complete ? 1 : 0);
  std::memcpy(p + 16, h.fs_id.data(), h.fs_id.size());
  PutU64(p + 32, h.eviction);
  PutU64(p + 40, h.bucket_bytes);
  PutU32(p + 48, h.z);
  PutU32(p + 52, Crc32c(p, 52));
  return out;
}

bool ReadRootHeader(int fd, const std::string& path, RootHeader* h) {
  std::array<std::uint8_t, kRootHeaderBytes> b{};
  if (!PreadAll(fd, b.data(), b.size(), 0, path).ok()) return false;
  const std::uint8_t* p = b.data();
  if (std::memcmp(p, kRootMagic.data(), kRootMagic.size()) != 0) return false;
  if (GetU32(p + 8) != kRootVersion || GetU32(p + 52) != Crc32c(p, 52)) return false;
  if (GetU32(p + 12) != 1) return false;
  h->complete = true;
  std::memcpy(h->fs_id.data(), p + 16, h->fs_id.size());
  h->eviction = GetU64(p + 32);
  h->bucket_bytes = GetU64(p + 40);
  h->z = GetU32(p + 48);
  return true;
}

std::uint64_t ShadowDataOffset(std::size_t count) {
  const std::uint64_t used = kShadowFixedBytes + 8 * std::uint64_t{count} + 4;
  return (used + kHeaderRegion - 1) / kHeaderRegion * kHeaderRegion;
}

std::vector<std::uint8_t> EncodeShadowHeader(const ShadowHeader& h) {
  const std::size_t used = kShadowFixedBytes + 8 * h.buckets.size();
  std::vector<std::uint8_t> out(used + 4, 0);
  std::uint8_t* p = out.data();
  std::memcpy(p, kShadowMagic.data(), kShadowMagic.size());
  PutU32(p + 8, kShadowVersion);
  PutU32(p + 12, h.sealed ? 1 : 0);
  std::memcpy(p + 16, h.fs_id.data(), h.fs_id.size());
  PutU32(p + 32, h.shape.height);
  PutU32(p + 36, h.shape.bucket_size);
  PutU32(p + 40, h.shape.elems_per_slot);
  PutU32(p + 44, h.attempt);
  PutU64(p + 48, h.eviction);
  PutU64(p + 56, h.buckets.size());
  PutU64(p + 64, h.data_offset);
  for (std::size_t i = 0; i < h.buckets.size(); ++i) PutU64(p + 72 + 8 * i, h.buckets[i]);
  PutU32(p + used, Crc32c(p, used));
  return out;
}

bool ReadShadowHeader(int fd, const std::string& path, ShadowHeader* h) {
  std::array<std::uint8_t, kShadowFixedBytes> fixed{};
  if (!PreadAll(fd, fixed.data(), fixed.size(), 0, path).ok()) return false;
  if (std::memcmp(fixed.data(), kShadowMagic.data(), kShadowMagic.size()) != 0) return false;
  const std::uint32_t version = GetU32(fixed.data() + 8);
  if (version != kShadowVersion && version != 2 && version != 1) return false;
  const std::uint64_t count = GetU64(fixed.data() + 56);
  if (count == 0 || count > kMaxShadowBuckets) return false;
  const std::size_t used = kShadowFixedBytes + 8 * count;
  std::vector<std::uint8_t> all(used + 4);
  if (!PreadAll(fd, all.data(), all.size(), 0, path).ok()) return false;
  if (GetU32(all.data() + used) != Crc32c(all.data(), used)) return false;
  const std::uint8_t* p = all.data();
  const std::uint32_t sealed = GetU32(p + 12);
  if (sealed > 1) return false;
  h->version = version;
  h->sealed = sealed == 1;
  std::memcpy(h->fs_id.data(), p + 16, h->fs_id.size());
  h->shape.height = GetU32(p + 32);
  h->shape.bucket_size = GetU32(p + 36);
  h->shape.elems_per_slot = GetU32(p + 40);
  h->attempt = GetU32(p + 44);
  h->eviction = GetU64(p + 48);
  h->data_offset = GetU64(p + 64);
  if (h->data_offset != ShadowDataOffset(count)) return false;
  h->buckets.resize(count);
  for (std::size_t i = 0; i < count; ++i) h->buckets[i] = GetU64(p + 72 + 8 * i);
  return true;
}

std::vector<std::uint8_t> EncodeMap(std::uint64_t generation,
                                    const std::vector<std::uint32_t>& places,
                                    std::uint64_t copy_bytes) {
  const std::uint64_t n = places.size() - 1;
  std::vector<std::uint8_t> out(copy_bytes, 0);
  std::uint8_t* p = out.data();
  std::memcpy(p, kMapMagic.data(), kMapMagic.size());
  PutU32(p + 8, kMapVersion);
  PutU64(p + 16, generation);
  PutU64(p + 24, n);
  for (std::uint64_t b = 1; b <= n; ++b) PutU32(p + kMapFixedBytes + 4 * (b - 1), places[b]);
  const std::size_t used = kMapFixedBytes + 4 * n;
  PutU32(p + used, Crc32c(p, used));
  return out;
}

bool DecodeMap(std::span<const std::uint8_t> in, std::uint64_t generation, std::uint64_t n,
               std::uint64_t places, std::vector<std::uint32_t>* out, std::string* why) {
  const std::size_t used = kMapFixedBytes + 4 * n;
  if (in.size() < used + 4 || std::memcmp(in.data(), kMapMagic.data(), kMapMagic.size()) != 0) {
    *why = "bad magic";
    return false;
  }
  const std::uint8_t* p = in.data();
  if (GetU32(p + 8) != kMapVersion || GetU64(p + 24) != n || GetU32(p + used) != Crc32c(p, used)) {
    *why = "checksum mismatch";
    return false;
  }
  if (GetU64(p + 16) != generation) {
    *why = "it is for eviction count " + std::to_string(GetU64(p + 16)) + ", not " +
           std::to_string(generation);
    return false;
  }
  out->assign(n + 1, 0);
  std::vector<bool> taken(places + 1, false);
  for (std::uint64_t b = 1; b <= n; ++b) {
    const std::uint32_t at = GetU32(p + kMapFixedBytes + 4 * (b - 1));
    if (at < 1 || at > places || taken[at]) {
      *why = "bucket " + std::to_string(b) + " maps to place " + std::to_string(at) +
             ", out of range or shared";
      return false;
    }
    taken[at] = true;
    (*out)[b] = at;
  }
  return true;
}

}  // namespace s3oram::serverd::store_format

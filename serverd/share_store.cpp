// On-disk share store. Layout and guarantees are described in share_store.h;
// this file adds the byte formats:
//
// shares.bin (format 3): header region (4096 bytes); the N bucket places;
// the digest region at the next multiple of 4096: kDigestElems elements per
// slot, slot s of place q at index (q - 1) * Z + s (oramcore/math/slot_digest.h);
// then, each at the next multiple of 4096, the S = 2 * max(H, 1) spare places
// (place N + i at spare_offset + (i - 1) * bucket_bytes), their digests in
// the same order, and two copies of the bucket map, map_copy_bytes each. A
// never-written slot is all zeros in both regions, and zeros digest to zero.
//
// Bucket map copy (little-endian): magic "S3ORBMAP" 8, version u32 (1),
// reserved u32, generation u64 (the evictions applied it records), count u64
// (N), place u32 x N (of buckets 1..N), crc32c u32 over everything before it.
// The map recording e evictions is copy e % 2. Open reads the copy of the
// header's applied_evictions; Commit of eviction e writes copy (e + 1) % 2,
// syncs, then writes the header: a crash between the two leaves the header
// at e, its map copy intact, and the sealed shadow to commit again.
//
// Header region: two meta records, at 0 and at 512. Record (little-endian),
// 116 bytes used, rest of its 512 bytes zero:
//   0  magic "S3ORMETA"        8
//   8  format version u32       (kMetaVersion)
//   12 record length u32        (kMetaRecordBytes; bytes covered by the CRC + 4)
//   16 generation u64           bumped on every update; copy = generation % 2
//   24 fs_id[16]
//   40 server_index u32
//   44 height u32, 48 bucket_size u32, 52 elems_per_slot u32
//   56 epoch u64, 64 applied_seq u64, 72 applied_evictions u64
//   80 digest seed[32]          the slot digests' key (drawn at creation)
//   112 crc32c u32 over bytes [0, 112)
// Format 2 had the same record but no spare places and no map (every bucket
// in its own place; the shadow's data in shadow.bin, copied by Commit); Open
// upgrades it in place (UpgradeToSparePlaces). Format 1 had no digests either:
// 84-byte records (the CRC at 80) and no digest region; Open upgrades it
// (UpgradeToDigests, then UpgradeToSparePlaces).
// An update writes generation g+1 into copy (g+1) % 2, i.e. never into the copy
// holding the current generation, so a torn write leaves that copy intact.
//
// shadow.bin: a header region of data_offset bytes (a multiple of 4096).
// Header (little-endian):
//   0  magic "S3ORSHDW"        8
//   8  format version u32, 12 sealed u32 (0 or 1)
//   16 fs_id[16]
//   32 height u32, 36 bucket_size u32, 40 elems_per_slot u32, 44 attempt u32
//   48 eviction u64, 56 count u64, 64 data_offset u64
//   72 bucket numbers u64 x count
//   then crc32c u32 over everything before it.
// The data of shadow bucket i and its digests are in shares.bin, in the i-th
// free place (ascending) of the map in force: the map changes only at
// Commit, so Open finds them again. (Versions 1 and 2 of this header kept the
// buckets and digests after it; UpgradeToSparePlaces moves a sealed one.)
// Seal orders the writes: data and digests, fdatasync, sealed header,
// fdatasync. A sealed header on disk therefore implies complete data, and a
// torn header fails its CRC and reads as "no sealed shadow". Begin writes an
// *unsealed* header (and syncs it) before touching any data, so an older sealed
// shadow can never be paired with half-overwritten data. Commit checks every
// shadow slot against its digest before writing the map: a shadow damaged on
// disk fails the commit instead of entering the tree.

// root.bin: the root an eviction reads, copied aside when its PREPARE
// starts so that the next round's root writes may overwrite the live root
// (background eviction). Header region of 4096 bytes, then the root bucket
// (bucket_bytes), then its Z slot digests. Header (little-endian):
//   0  magic "S3ORROOT" 8, 8 format version u32, 12 complete u32 (0 or 1)
//   16 fs_id[16], 32 eviction u64, 40 bucket_bytes u64, 48 Z u32
//   52 crc32c u32 over bytes [0, 52)
// SnapshotRoot writes an incomplete header (synced) before the data, then the
// data and digests, a sync, the complete header and a sync: a complete header
// on disk implies complete data, and a torn one reads as "no snapshot".

#include "serverd/share_store.h"

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

namespace s3oram::serverd {

// Buckets are exposed as Elem* straight from the mmap, and elements are
// defined as 32-bit little-endian words.
static_assert(std::endian::native == std::endian::little,
              "the share file stores elements in host order; host must be little-endian");
static_assert(sizeof(Elem) == 4);

namespace {

constexpr std::uint64_t kHeaderRegion = 4096;
constexpr std::uint64_t kMetaCopyBytes = 512;
constexpr std::uint32_t kMetaVersion = 3;
constexpr std::uint32_t kMetaRecordBytes = 116;
constexpr std::uint32_t kMetaVersion2 = 2;  // no spare buckets or bucket map; upgraded by Open
constexpr std::uint32_t kMetaVersion1 = 1;  // no digests either; upgraded by Open
constexpr std::uint32_t kMetaRecordBytes1 = 84;
constexpr std::array<char, 8> kMetaMagic = {'S', '3', 'O', 'R', 'M', 'E', 'T', 'A'};

constexpr std::uint32_t kShadowVersion = 3;  // 2: data in shadow.bin; 1: no digests either
constexpr std::uint64_t kShadowFixedBytes = 72;
constexpr std::array<char, 8> kShadowMagic = {'S', '3', 'O', 'R', 'S', 'H', 'D', 'W'};
// One eviction rewrites a path (H + 1 <= 41 buckets) plus a sibling leaf; the
// cap only bounds what Open allocates for the bucket list of a damaged header.
constexpr std::uint64_t kMaxShadowBuckets = 1u << 16;

constexpr std::uint32_t kMaxHeight = 40;

constexpr std::uint32_t kMapVersion = 1;
constexpr std::uint64_t kMapFixedBytes = 32;
constexpr std::array<char, 8> kMapMagic = {'S', '3', 'O', 'R', 'B', 'M', 'A', 'P'};
// Largest single read/write request; Linux caps one request at 0x7ffff000 bytes.
constexpr std::size_t kMaxIo = std::size_t{1} << 30;

// ---- CRC32C (Castagnoli, reflected polynomial 0x82F63B78), table driven. Used
// only for headers, so the simple byte-at-a-time form is fast enough.
constexpr std::array<std::uint32_t, 256> MakeCrcTable() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<std::uint32_t, 256> kCrcTable = MakeCrcTable();

template <typename Byte>
constexpr std::uint32_t Crc32c(const Byte* p, std::size_t n) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) {
    c = kCrcTable[(c ^ static_cast<std::uint8_t>(p[i])) & 0xFF] ^ (c >> 8);
  }
  return ~c;
}
// The standard check value of CRC-32C.
static_assert(Crc32c("123456789", 9) == 0xE3069283u);

// ---- little-endian field access into byte buffers.
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

// ---- system call wrappers: EINTR, short transfers, errno -> Status with path.
std::string ErrnoText(int e) { return std::error_code(e, std::generic_category()).message(); }

// A full disk is its own code: the client reports it as ENOSPC, and it
// clears once space is freed (nothing is damaged by a refused write).
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

// Corruption if the file ends early: every caller reads a range the header
// says exists.
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

// mkdir -p; directories it creates get mode 0700 (the shares are secret).
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

// Closes a descriptor on scope exit unless released.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct Geometry {
  std::uint64_t bucket_bytes = 0;
  std::uint64_t num_buckets = 0;
  std::uint64_t z = 0;              // slots per bucket
  std::uint64_t slots = 0;          // num_buckets * Z
  std::uint64_t digest_offset = 0;  // first byte of the digest region
  std::uint64_t spare = 0;          // spare bucket places: 2 * max(H, 1)
  std::uint64_t spare_offset = 0;   // first spare place
  std::uint64_t spare_digest_offset = 0;
  std::uint64_t map_offset = 0;  // first of the two bucket map copies
  std::uint64_t map_copy_bytes = 0;
  std::uint64_t file_bytes = 0;     // format 3: all of the above
  std::uint64_t v2_file_bytes = 0;  // format 2: header, buckets, digests
  std::uint64_t v1_file_bytes = 0;  // format 1: header and buckets only
  std::uint64_t places() const { return num_buckets + spare; }
};

constexpr std::uint64_t kDigestBytes = digest::kDigestElems * sizeof(Elem);
static_assert(sizeof(digest::SlotDigest) == kDigestBytes,
              "digests are read from the mapping as SlotDigest records");

std::string ShapeText(const wire::StoreShape& s) {
  return "H=" + std::to_string(s.height) + " Z=" + std::to_string(s.bucket_size) +
         " m=" + std::to_string(s.elems_per_slot);
}

// Sizes implied by a shape, or why the shape is unusable. The file size must
// fit off_t, which also keeps every offset computed from it in range.
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

// Decodes one meta copy of format 1 or 2 (*version says which; a format-1
// record has no seed); on failure sets *why.
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

constexpr std::uint32_t kRootVersion = 1;
constexpr std::uint64_t kRootHeaderBytes = 56;
constexpr std::array<char, 8> kRootMagic = {'S', '3', 'O', 'R', 'R', 'O', 'O', 'T'};

struct RootHeader {
  bool complete = false;
  wire::FsId fs_id{};
  std::uint64_t eviction = 0;
  std::uint64_t bucket_bytes = 0;
  std::uint32_t z = 0;
};

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

// False if root.bin's header is absent, torn, incomplete or of another version.
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

struct ShadowHeader {
  std::uint32_t version = kShadowVersion;  // 1, 2: by an older server (data in shadow.bin)
  bool sealed = false;
  wire::FsId fs_id{};
  wire::StoreShape shape;
  std::uint32_t attempt = 0;
  std::uint64_t eviction = 0;
  std::vector<std::uint64_t> buckets;
  std::uint64_t data_offset = 0;
};

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

// Reads shadow.bin's header. Returns false if it is absent, torn or from an
// unknown version: all of these mean "no usable shadow".
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

// One copy of the bucket map: places[b] for buckets b = 1..N (places[0]
// unused), recording eviction count `generation`.
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

// Decodes a map copy for `generation` of a tree of n buckets and `places`
// places; false (with *why) if it is torn, foreign, of another generation,
// or not a one-to-one map into 1..places.
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

}  // namespace

struct ShareStore::Impl {
  enum class ShadowState { kNone, kOpen, kSealed };

  std::string dir;
  std::string shares_path;
  std::string shadow_path;
  bool sync = true;
  Fd dir_fd;  // holds the exclusive flock on dir
  Fd fd;      // shares.bin
  const std::uint8_t* map = nullptr;
  std::size_t map_len = 0;
  Geometry geo;
  std::uint64_t generation = 0;  // of the meta copy that holds meta_
  // Where each bucket lies: places[b] for b = 1..N, a place being one of the
  // N bucket positions of format 2 (1..N) or a spare one (N+1..N+spare).
  // One-to-one; the `spare` places no bucket holds are free, and an
  // eviction's shadow is written into them. Changes only at Commit (and is
  // the identity until the first one, and in every store of format < 3).
  std::vector<std::uint32_t> places;
  void SetIdentityPlaces() {
    places.resize(geo.num_buckets + 1);
    for (std::uint64_t b = 0; b <= geo.num_buckets; ++b) places[b] = static_cast<std::uint32_t>(b);
  }
  // The free places, ascending: the shadow's bucket i goes to the i-th.
  std::vector<std::uint32_t> FreePlaces() const {
    std::vector<bool> taken(geo.places() + 1, false);
    for (std::uint64_t b = 1; b <= geo.num_buckets; ++b) taken[places[b]] = true;
    std::vector<std::uint32_t> free;
    for (std::uint64_t q = 1; q <= geo.places(); ++q) {
      if (!taken[q]) free.push_back(static_cast<std::uint32_t>(q));
    }
    return free;
  }
  std::uint64_t PlaceOffset(std::uint64_t q) const {
    return q <= geo.num_buckets ? kHeaderRegion + (q - 1) * geo.bucket_bytes
                                : geo.spare_offset + (q - geo.num_buckets - 1) * geo.bucket_bytes;
  }
  std::uint64_t PlaceDigestOffset(std::uint64_t q, std::uint64_t slot = 0) const {
    return q <= geo.num_buckets ? geo.digest_offset + ((q - 1) * geo.z + slot) * kDigestBytes
                                : geo.spare_digest_offset +
                                      ((q - geo.num_buckets - 1) * geo.z + slot) * kDigestBytes;
  }
  // Writes the bucket map recording `evictions` applied (copy evictions % 2:
  // never the copy Open reads while the header says evictions - 1); not synced.
  Status WriteMapCopy(std::uint64_t evictions, const std::vector<std::uint32_t>& map_places) {
    const std::vector<std::uint8_t> enc = EncodeMap(evictions, map_places, geo.map_copy_bytes);
    return PwriteAll(fd.get(), enc.data(), enc.size(),
                     geo.map_offset + (evictions % 2) * geo.map_copy_bytes, shares_path);
  }
  // Loads the map recording `evictions` applied into `places`.
  Status ReadMapCopy(std::uint64_t evictions) {
    std::vector<std::uint8_t> enc(geo.map_copy_bytes);
    S3ORAM_RETURN_IF_ERROR(PreadAll(fd.get(), enc.data(), enc.size(),
                                    geo.map_offset + (evictions % 2) * geo.map_copy_bytes,
                                    shares_path));
    std::string why;
    if (!DecodeMap(enc, evictions, geo.num_buckets, geo.places(), &places, &why)) {
      return Status::Damaged("the bucket map of " + shares_path + " (copy " +
                             std::to_string(evictions % 2) + ") is damaged: " + why +
                             "; this server must be repaired from the others: s3oram rebuild");
    }
    return Status::Ok();
  }
  digest::Seed seed{};
  std::unique_ptr<const digest::DigestKey> key;  // from seed; set once the shape is known
  // Set when an fdatasync fails: after that the kernel may have dropped dirty
  // pages while reporting the error only once, so nothing written since the last
  // successful sync can be trusted and later syncs could wrongly succeed. The
  // store refuses further mutations; a restart re-reads the on-disk state.
  // Guarded by failure_mu: a root write on the server's main thread and a
  // PREPARE's shadow writes on its own thread may both record one.
  std::string failure;
  mutable std::mutex failure_mu;
  void SetFailure(const std::string& what) {
    const std::lock_guard lock(failure_mu);
    if (failure.empty()) failure = what;
  }
  // Set while the file is shares.bin.rebuild (CreateForRebuild .. FinishRebuild).
  bool rebuilding = false;
  std::string rebuild_path;

  Fd shadow_fd;
  ShadowState shadow_state = ShadowState::kNone;
  // ShadowDigests checked every slot of the sealed shadow in this process;
  // false again at every change of shadow_state (and after Open).
  mutable bool shadow_verified = false;
  // Every change of shadow_state goes through here, so that a verification
  // never outlives the shadow it checked.
  void SetShadowState(ShadowState state) {
    shadow_state = state;
    shadow_verified = false;
  }
  ShadowHeader shadow;
  std::vector<bool> shadow_filled;
  // The places the shadow's buckets are written to (FreePlaces at Begin).
  std::vector<std::uint32_t> shadow_places;
  // The shadow buckets' slot digests, Z per bucket in list order; written
  // beside their places at Seal, read back by Open.
  std::vector<digest::SlotDigest> shadow_digests;

  // root.bin: the input root of the eviction under way (SnapshotRoot).
  std::string root_path;
  Fd root_fd;
  std::uint64_t root_snapshot = 0;  // eviction + 1 of the complete snapshot held; 0: none
  std::vector<digest::SlotDigest> root_digests;  // its Z slot digests

  // Writes root.bin as the root snapshot of `eviction`: an incomplete
  // header (synced), `data` and `digests`, a sync, the complete header and
  // a sync; the snapshot counts from then on (see the format above).
  Status WriteRootFile(const wire::FsId& fs_id, std::uint64_t eviction, const Elem* data,
                       std::vector<digest::SlotDigest> digests);

  ~Impl() {
    if (map != nullptr) ::munmap(const_cast<std::uint8_t*>(map), map_len);
  }

  Status Usable() const {
    const std::lock_guard lock(failure_mu);
    if (failure.empty()) return Status::Ok();
    return Status::IoError("share store in " + dir + " is unusable after an earlier failure (" +
                           failure + "); restart the server");
  }
  // Usable, and live (not being rebuilt): for every mutation of a live store.
  Status Live() const {
    if (rebuilding) {
      return Status::FailedPrecondition("share store in " + dir +
                                        " is being rebuilt and not live yet");
    }
    const std::lock_guard lock(failure_mu);
    if (failure.empty()) return Status::Ok();
    return Status::IoError("share store in " + dir + " is unusable after an earlier failure (" +
                           failure + "); restart the server");
  }
  Status Sync(int f, const std::string& path) {
    if (!sync) return Status::Ok();
    Status s = DataSync(f, path);
    if (!s.ok()) SetFailure(s.message());
    return s;
  }
  std::uint64_t BucketOffset(std::uint64_t b) const { return PlaceOffset(places[b]); }
  std::uint64_t DigestOffset(std::uint64_t b, std::uint64_t slot = 0) const {
    return PlaceDigestOffset(places[b], slot);
  }
  // Bucket b's stored slot digests (Z of them), straight from the mapping.
  const digest::SlotDigest* StoredDigests(std::uint64_t b) const {
    return reinterpret_cast<const digest::SlotDigest*>(map + DigestOffset(b));
  }
  // Digests of `data` (whole buckets) into out, or Corruption naming the first
  // slot with an element no sharing produces (>= p): such data must never be
  // stored under a digest.
  Status DigestBuckets(std::span<const Elem> data, std::span<digest::SlotDigest> out,
                       const char* what) const {
    const std::size_t bad = key->DigestBucket(data, out);
    if (bad == out.size()) return Status::Ok();
    return Status::Corruption(
        std::string(what) + ": slot " + std::to_string(bad) +
        " holds an element that is not a field element; refusing to store it");
  }
  Status WriteDigests(int f, const std::string& path, std::uint64_t offset,
                      std::span<const digest::SlotDigest> d) {
    return PwriteAll(f, d.data(), d.size_bytes(), offset, path);
  }
  // Whole buckets from `first` on and their digests, into the open file
  // (`path` for messages); not synced. `who` names the caller in a range
  // error, `what` the data in a digest refusal.
  Status WriteWholeBuckets(std::uint64_t first, std::span<const Elem> data, const std::string& path,
                           const char* who, const char* what) {
    const std::uint64_t be = geo.bucket_bytes / sizeof(Elem);
    if (first < 1 || first > geo.num_buckets || data.empty() || data.size() % be != 0 ||
        data.size() / be > geo.num_buckets - first + 1) {
      return Status::InvalidArgument(std::string(who) + ": range or data size out of range");
    }
    std::vector<digest::SlotDigest> digests(data.size() / (be / geo.z));
    S3ORAM_RETURN_IF_ERROR(DigestBuckets(data, digests, what));
    // One write per run of buckets whose places follow each other in one
    // region (all of them until the first eviction).
    const std::uint64_t count = data.size() / be;
    for (std::uint64_t i = 0; i < count;) {
      std::uint64_t run = 1;
      while (i + run < count && places[first + i + run] == places[first + i] + run &&
             places[first + i + run] != geo.num_buckets + 1) {
        ++run;
      }
      S3ORAM_RETURN_IF_ERROR(PwriteAll(fd.get(), data.data() + i * be, run * geo.bucket_bytes,
                                       BucketOffset(first + i), path));
      S3ORAM_RETURN_IF_ERROR(WriteDigests(
          fd.get(), path, DigestOffset(first + i),
          std::span(digests).subspan(i * geo.z, static_cast<std::size_t>(run * geo.z))));
      i += run;
    }
    return Status::Ok();
  }
  // Maps the whole share file read-only. MAP_SHARED sees every pwrite at once
  // (one page cache), so Bucket() reflects WriteSlot and Commit immediately.
  Status Map(const std::string& path) {
    void* m = ::mmap(nullptr, geo.file_bytes, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (m == MAP_FAILED) return SysError("mmap of", path, errno);
    map = static_cast<const std::uint8_t*>(m);
    map_len = geo.file_bytes;
    return Status::Ok();
  }
  // For each of `count` places of bucket size from file offset `begin` on:
  // true if it lies entirely in a file hole.
  Result<std::vector<bool>> RegionHoles(std::uint64_t begin, std::uint64_t count) const {
    const std::uint64_t bb = geo.bucket_bytes;
    const std::uint64_t end = begin + count * bb;
    std::vector<bool> hole(count, true);
    // Walk the data extents that overlap [begin, end) and clear the flag of every
    // place they touch (a place sharing a filesystem block with written data
    // counts as written: never the other way round).
    std::uint64_t pos = begin;
    while (pos < end) {
      const off_t d = ::lseek(fd.get(), static_cast<off_t>(pos), SEEK_DATA);
      if (d < 0) {
        if (errno == ENXIO) break;  // no data at or after pos
        // SEEK_DATA unsupported or failing: treat everything as written.
        return std::vector<bool>(count, false);
      }
      const auto data_start = static_cast<std::uint64_t>(d);
      if (data_start >= end) break;
      off_t h = ::lseek(fd.get(), d, SEEK_HOLE);
      const std::uint64_t data_end =
          h < 0 ? end : std::min<std::uint64_t>(end, static_cast<std::uint64_t>(h));
      const std::uint64_t from = (std::max(data_start, begin) - begin) / bb;
      const std::uint64_t to = (data_end - begin + bb - 1) / bb;  // exclusive
      for (std::uint64_t i = from; i < std::min(to, count); ++i) hole[i] = false;
      if (data_end <= data_start) break;  // no progress: be conservative and stop
      pos = data_end;
    }
    return hole;
  }
  // For each bucket of [first, first + count): true if it lies entirely in a
  // file hole (ShareStore::Holes).
  Result<std::vector<bool>> Holes(std::uint64_t first, std::uint64_t count) const {
    const std::uint64_t n = geo.num_buckets;
    if (first < 1 || count == 0 || first > n || count > n - first + 1) {
      return Status::InvalidArgument("Holes: range out of range");
    }
    // Places 1..n then the spare ones; the range's buckets may lie in both.
    std::uint64_t lo = places[first], hi = places[first];
    for (std::uint64_t b = first; b < first + count; ++b) {
      lo = std::min<std::uint64_t>(lo, places[b]);
      hi = std::max<std::uint64_t>(hi, places[b]);
    }
    std::vector<bool> main_holes, spare_holes;
    if (lo <= n) {
      const std::uint64_t top = std::min(hi, n);
      S3ORAM_ASSIGN_OR_RETURN(main_holes, RegionHoles(PlaceOffset(lo), top - lo + 1));
    }
    if (hi > n) {
      const std::uint64_t bottom = std::max(lo, n + 1);
      S3ORAM_ASSIGN_OR_RETURN(spare_holes, RegionHoles(PlaceOffset(bottom), hi - bottom + 1));
    }
    std::vector<bool> hole(count);
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::uint64_t q = places[first + i];
      hole[i] = q <= n ? main_holes[q - lo] : spare_holes[q - std::max(lo, n + 1)];
    }
    return hole;
  }

  // Format 1 -> 2: a new digest key, every written slot's digest, then the
  // format-2 header. The digests record the slots as they are now: damage
  // older than the upgrade is not detected (a slot holding a non-field element
  // is the exception: it gets a digest no slot matches, so it reads as
  // damaged). Interrupted, it starts over at the next Open (the header is
  // still format 1).
  Status UpgradeToDigests(const ServerMeta& m) {
    random::Bytes(seed);
    key = std::make_unique<const digest::DigestKey>(seed, m.shape.elems_per_slot);
    spdlog::info("share store in {}: adding slot digests (format 1 -> 2, {} buckets)", dir,
                 geo.num_buckets);
    // Back to format 1's size first: an interrupted attempt may have left
    // digests under another seed, and the region must read as zeros (the
    // digest of a hole) wherever this attempt writes nothing.
    for (const std::uint64_t size : {geo.v1_file_bytes, geo.v2_file_bytes}) {
      while (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
        if (errno == EINTR) continue;
        return SysError("sizing", shares_path, errno);
      }
    }
    const std::size_t m_elems = key->slot_elems();
    std::vector<Elem> bucket(geo.z * m_elems);
    std::vector<digest::SlotDigest> digests(geo.z);
    std::uint64_t written = 0, bad = 0;
    S3ORAM_ASSIGN_OR_RETURN(std::vector<bool> hole, Holes(1, geo.num_buckets));
    for (std::uint64_t b = 1; b <= geo.num_buckets; ++b) {
      if (hole[b - 1]) continue;  // zeros, and the zero digest is already there
      S3ORAM_RETURN_IF_ERROR(
          PreadAll(fd.get(), bucket.data(), geo.bucket_bytes, BucketOffset(b), shares_path));
      for (std::uint64_t slot = 0; slot < geo.z; ++slot) {
        std::span<const Elem> x(bucket.data() + slot * m_elems, m_elems);
        if (!key->Digest(x, &digests[slot])) {
          digests[slot] = {field::kPrime, field::kPrime};  // no slot digests to this
          ++bad;
        }
      }
      S3ORAM_RETURN_IF_ERROR(WriteDigests(fd.get(), shares_path, DigestOffset(b), digests));
      ++written;
    }
    S3ORAM_RETURN_IF_ERROR(Sync(fd.get(), shares_path));
    spdlog::info(
        "share store in {}: digests added for {} written buckets{}", dir, written,
        bad ? "; " + std::to_string(bad) + " slots hold non-field elements and read as damaged"
            : std::string());
    return UpgradeToSparePlaces(m);  // writes the format-3 header
  }

  // Format 2 -> 3: grows the file by the spare places, their digests and the
  // bucket map, writes the identity map for the evictions applied, then the
  // format-3 header. Interrupted, it starts over at the next Open. A shadow
  // sealed by the format-2 server stays in shadow.bin until the format-3
  // store moves it (MoveOlderShadow): nothing is written to the spare places
  // before the header says format 3, so an upgrade started over (which may
  // truncate the file) cannot lose it.
  Status UpgradeToSparePlaces(const ServerMeta& m) {
    spdlog::info(
        "share store in {}: adding {} spare bucket places and the bucket map "
        "(format 2 -> 3): evictions commit without copying",
        dir, geo.spare);
    while (::ftruncate(fd.get(), static_cast<off_t>(geo.file_bytes)) != 0) {
      if (errno == EINTR) continue;
      return SysError("sizing", shares_path, errno);
    }
    SetIdentityPlaces();
    S3ORAM_RETURN_IF_ERROR(WriteMapCopy(m.applied_evictions, places));
    S3ORAM_RETURN_IF_ERROR(Sync(fd.get(), shares_path));
    return WriteMeta(m);
  }

  // A shadow sealed by a format-1 or -2 server (its buckets and digests in
  // shadow.bin) for the next eviction: copied with its digests into the free
  // places, synced, then its header rewritten as format 3 (sealed), so that
  // its commit, which no longer copies, can run. Cut off before the header,
  // it is moved again at the next Open: shadow.bin keeps the data until the
  // next BeginShadow. A shadow that is torn, foreign, for another eviction or
  // shorter than its header says is left alone (Open then ignores it).
  Status MoveOlderShadow(const ServerMeta& m) {
    Fd sfd(::open(shadow_path.c_str(), O_RDWR | O_CLOEXEC));
    if (!sfd.valid())
      return errno == ENOENT ? Status::Ok() : SysError("opening", shadow_path, errno);
    ShadowHeader sh;
    if (!ReadShadowHeader(sfd.get(), shadow_path, &sh) || !sh.sealed ||
        sh.version == kShadowVersion || sh.fs_id != m.fs_id || !(sh.shape == m.shape) ||
        sh.eviction != m.applied_evictions || sh.buckets.size() > geo.spare) {
      return Status::Ok();
    }
    const std::uint64_t count = sh.buckets.size();
    const std::uint64_t digest_at = sh.data_offset + count * geo.bucket_bytes;
    const std::uint64_t need = digest_at + (sh.version == 2 ? count * geo.z * kDigestBytes : 0);
    struct stat st {};
    if (::fstat(sfd.get(), &st) != 0 || static_cast<std::uint64_t>(st.st_size) < need) {
      return Status::Ok();
    }
    std::unordered_set<std::uint64_t> seen;
    for (std::uint64_t b : sh.buckets) {
      if (b < 1 || b > geo.num_buckets || !seen.insert(b).second) return Status::Ok();
    }
    const std::vector<std::uint32_t> free = FreePlaces();
    std::vector<Elem> bucket(geo.bucket_bytes / sizeof(Elem));
    std::vector<digest::SlotDigest> d(geo.z);
    for (std::uint64_t i = 0; i < count; ++i) {
      S3ORAM_RETURN_IF_ERROR(PreadAll(sfd.get(), bucket.data(), geo.bucket_bytes,
                                      sh.data_offset + i * geo.bucket_bytes, shadow_path));
      if (sh.version == 2) {
        S3ORAM_RETURN_IF_ERROR(PreadAll(sfd.get(), d.data(), d.size() * kDigestBytes,
                                        digest_at + i * geo.z * kDigestBytes, shadow_path));
      } else {
        // Sealed before digests existed: digested as it is now.
        S3ORAM_RETURN_IF_ERROR(DigestBuckets(bucket, d, "format-1 shadow"));
      }
      S3ORAM_RETURN_IF_ERROR(
          PwriteAll(fd.get(), bucket.data(), geo.bucket_bytes, PlaceOffset(free[i]), shares_path));
      S3ORAM_RETURN_IF_ERROR(WriteDigests(fd.get(), shares_path, PlaceDigestOffset(free[i]), d));
    }
    S3ORAM_RETURN_IF_ERROR(Sync(fd.get(), shares_path));
    FaultPoint("server.upgrade.shadow_moved");
    const std::vector<std::uint8_t> enc = EncodeShadowHeader(sh);  // as format 3, sealed
    S3ORAM_RETURN_IF_ERROR(PwriteAll(sfd.get(), enc.data(), enc.size(), 0, shadow_path));
    S3ORAM_RETURN_IF_ERROR(Sync(sfd.get(), shadow_path));
    spdlog::info(
        "share store in {}: the sealed shadow of eviction {} (format {}) moved into the "
        "spare places",
        dir, sh.eviction, sh.version);
    return Status::Ok();
  }

  // Writes `m` as the next generation into the copy not holding the current
  // one, then syncs unless `sync_now` is false (the caller then syncs before
  // relying on it). The caller updates meta_ only once this returns OK.
  Status WriteMeta(const ServerMeta& m, bool sync_now = true) {
    const std::uint64_t gen = generation + 1;
    std::array<std::uint8_t, kMetaCopyBytes> rec{};
    EncodeMeta(m, seed, gen, rec.data());
    S3ORAM_RETURN_IF_ERROR(
        PwriteAll(fd.get(), rec.data(), rec.size(), (gen % 2) * kMetaCopyBytes, shares_path));
    if (sync_now) S3ORAM_RETURN_IF_ERROR(Sync(fd.get(), shares_path));
    generation = gen;
    return Status::Ok();
  }
};

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

}  // namespace

ShareStore::~ShareStore() = default;

std::uint64_t ShareStore::bucket_elems() const {
  return std::uint64_t{meta_.shape.bucket_size} * meta_.shape.elems_per_slot;
}
std::uint64_t ShareStore::num_buckets() const { return impl_->geo.num_buckets; }
std::uint64_t ShareStore::file_bytes() const { return impl_->geo.file_bytes; }
std::uint64_t ShareStore::allocated_bytes() const {
  struct stat st {};
  if (::fstat(impl_->fd.get(), &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

const Elem* ShareStore::Bucket(std::uint64_t b) const {
  assert(b >= 1 && b <= impl_->geo.num_buckets && "bucket out of range; callers validate");
  // The header region is 4096 bytes and buckets are whole elements, so every
  // bucket is Elem-aligned within the page-aligned mapping.
  return reinterpret_cast<const Elem*>(impl_->map + impl_->BucketOffset(b));
}

Status ShareStore::ReadBucket(std::uint64_t b, std::span<Elem> out) const {
  if (b < 1 || b > impl_->geo.num_buckets || out.size() != bucket_elems()) {
    return Status::InvalidArgument("ReadBucket: bucket or buffer size out of range");
  }
  return PreadAll(impl_->fd.get(), out.data(), out.size_bytes(), impl_->BucketOffset(b),
                  impl_->shares_path);
}

Result<const Elem*> ShareStore::BucketForRead(std::uint64_t b, std::span<Elem> scratch) const {
  if (b < 1 || b > impl_->geo.num_buckets) {
    return Status::InvalidArgument("BucketForRead: bucket out of range");
  }
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t off = impl_->BucketOffset(b);
  const std::uint64_t begin = off / page * page;
  const std::uint64_t end = off + bucket_elems() * sizeof(Elem);
  std::vector<unsigned char> resident((end - begin + page - 1) / page);
  void* addr = const_cast<std::uint8_t*>(impl_->map + begin);  // mincore only inspects
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
    if (sync) S3ORAM_RETURN_IF_ERROR(SyncDirectory(dir));
  }
  impl->generation = 1;

  std::unique_ptr<ShareStore> store(new ShareStore());
  store->impl_ = std::move(impl);
  store->meta_ = meta;
  return store;
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

  // The valid copy with the highest generation is the current meta; the other
  // is either one update older or a torn write of the newest update, whose data
  // was synced before the header write began but which was never acknowledged.
  ServerMeta best;
  std::uint64_t best_gen = 0;
  std::uint32_t best_version = 0;
  bool found = false;
  std::string why[2];
  for (int c = 0; c < 2; ++c) {
    ServerMeta m;
    digest::Seed seed{};
    std::uint32_t version = 0;
    std::uint64_t gen = 0;
    if (!DecodeMeta(header.data() + c * kMetaCopyBytes, &m, &seed, &version, &gen, &why[c])) {
      continue;
    }
    if (!found || gen > best_gen) {
      best = m;
      best_gen = gen;
      best_version = version;
      impl->seed = seed;
      found = true;
    }
  }
  if (!found) {
    return Status::Corruption(path + ": no valid header copy (copy 0: " + why[0] +
                              "; copy 1: " + why[1] + ")");
  }
  std::string shape_why;
  if (!ComputeGeometry(best.shape, &impl->geo, &shape_why)) {
    return Status::Corruption(path + ": header describes an impossible shape: " + shape_why);
  }
  impl->generation = best_gen;
  impl->SetIdentityPlaces();
  if (best_version == kMetaVersion1) {
    // Any size from format 1's to format 3's: an upgrade may have been
    // interrupted after it grew the file (the header is written last).
    if (size < impl->geo.v1_file_bytes || size > impl->geo.file_bytes) {
      return Status::Corruption(path + " is " + std::to_string(size) + " bytes but shape " +
                                ShapeText(best.shape) + " needs " +
                                std::to_string(impl->geo.v1_file_bytes) + " (format 1)");
    }
    S3ORAM_RETURN_IF_ERROR(impl->UpgradeToDigests(best));
  } else if (best_version == kMetaVersion2) {
    if (size < impl->geo.v2_file_bytes || size > impl->geo.file_bytes) {
      return Status::Corruption(path + " is " + std::to_string(size) + " bytes but shape " +
                                ShapeText(best.shape) + " needs " +
                                std::to_string(impl->geo.v2_file_bytes) + " (format 2)");
    }
    impl->key = std::make_unique<const digest::DigestKey>(impl->seed, best.shape.elems_per_slot);
    S3ORAM_RETURN_IF_ERROR(impl->UpgradeToSparePlaces(best));
  } else if (size != impl->geo.file_bytes) {
    return Status::Corruption(path + " is " + std::to_string(size) + " bytes but shape " +
                              ShapeText(best.shape) + " needs " +
                              std::to_string(impl->geo.file_bytes));
  } else {
    impl->key = std::make_unique<const digest::DigestKey>(impl->seed, best.shape.elems_per_slot);
    S3ORAM_RETURN_IF_ERROR(impl->ReadMapCopy(best.applied_evictions));
  }
  // Upgraded now (or format 3 already): a shadow an older server sealed moves
  // to where this one keeps shadows.
  S3ORAM_RETURN_IF_ERROR(impl->MoveOlderShadow(best));
  S3ORAM_RETURN_IF_ERROR(impl->Map(path));

  // A sealed shadow survives only if it belongs to this store and is the next
  // eviction; one for an earlier eviction is obsolete (its commit completed),
  // and anything unsealed, torn or foreign is ignored and overwritten by the
  // next BeginShadow.
  Fd sfd(::open(impl->shadow_path.c_str(), O_RDWR | O_CLOEXEC));
  if (!sfd.valid() && errno != ENOENT) return SysError("opening", impl->shadow_path, errno);
  ShadowHeader sh;
  if (sfd.valid() && ReadShadowHeader(sfd.get(), impl->shadow_path, &sh) && sh.sealed &&
      sh.version == kShadowVersion && sh.fs_id == best.fs_id && sh.shape == best.shape &&
      sh.eviction == best.applied_evictions && sh.buckets.size() <= impl->geo.spare) {
    std::unordered_set<std::uint64_t> seen;
    bool ok = true;
    for (std::uint64_t b : sh.buckets) {
      ok = ok && b >= 1 && b <= impl->geo.num_buckets && seen.insert(b).second;
    }
    if (ok) {
      // The shadow lies in the free places, in list order (BeginShadow);
      // the digests are small (8 bytes a slot) and read now, the data stay
      // on disk until Commit, which checks them against these.
      std::vector<std::uint32_t> free = impl->FreePlaces();
      free.resize(sh.buckets.size());
      std::vector<digest::SlotDigest> d(sh.buckets.size() * impl->geo.z);
      for (std::size_t i = 0; i < free.size(); ++i) {
        S3ORAM_RETURN_IF_ERROR(PreadAll(impl->fd.get(), d.data() + i * impl->geo.z,
                                        impl->geo.z * kDigestBytes,
                                        impl->PlaceDigestOffset(free[i]), path));
      }
      impl->SetShadowState(Impl::ShadowState::kSealed);
      impl->shadow = std::move(sh);
      impl->shadow_places = std::move(free);
      impl->shadow_filled.assign(impl->shadow.buckets.size(), true);
      impl->shadow_digests = std::move(d);
    }
  }
  impl->shadow_fd = std::move(sfd);

  // The root snapshot counts only for the eviction not yet applied.
  Fd rfd(::open(impl->root_path.c_str(), O_RDWR | O_CLOEXEC));
  if (!rfd.valid() && errno != ENOENT) return SysError("opening", impl->root_path, errno);
  RootHeader rh;
  if (rfd.valid() && ReadRootHeader(rfd.get(), impl->root_path, &rh) && rh.fs_id == best.fs_id &&
      rh.eviction == best.applied_evictions && rh.bucket_bytes == impl->geo.bucket_bytes &&
      rh.z == impl->geo.z) {
    struct stat rst {};
    const std::uint64_t need = kHeaderRegion + rh.bucket_bytes + rh.z * kDigestBytes;
    if (::fstat(rfd.get(), &rst) == 0 && static_cast<std::uint64_t>(rst.st_size) >= need) {
      std::vector<digest::SlotDigest> d(rh.z);
      S3ORAM_RETURN_IF_ERROR(PreadAll(rfd.get(), d.data(), d.size() * kDigestBytes,
                                      kHeaderRegion + rh.bucket_bytes, impl->root_path));
      impl->root_snapshot = rh.eviction + 1;
      impl->root_digests = std::move(d);
    }
  }
  impl->root_fd = std::move(rfd);

  std::unique_ptr<ShareStore> store(new ShareStore());
  store->impl_ = std::move(impl);
  store->meta_ = best;
  return store;
}

Status ShareStore::UpdateMeta(const ServerMeta& meta) {
  S3ORAM_RETURN_IF_ERROR(impl_->Live());
  if (!(meta.shape == meta_.shape)) {
    return Status::InvalidArgument("UpdateMeta cannot change the store shape (" +
                                   ShapeText(meta_.shape) + " -> " + ShapeText(meta.shape) +
                                   "); create a new store");
  }
  if (meta.applied_evictions != meta_.applied_evictions) {
    // Only Commit moves it, with the bucket map that goes with it.
    return Status::InvalidArgument("UpdateMeta cannot change the evictions applied");
  }
  S3ORAM_RETURN_IF_ERROR(impl_->WriteMeta(meta));
  meta_ = meta;
  return Status::Ok();
}

Status ShareStore::ReadBuckets(std::uint64_t first, std::uint64_t count,
                               std::span<Elem> out) const {
  const std::uint64_t n = impl_->geo.num_buckets;
  if (first < 1 || count == 0 || first > n || count > n - first + 1 ||
      out.size() != count * bucket_elems()) {
    return Status::InvalidArgument("ReadBuckets: range or buffer size out of range");
  }
  // One read per run of buckets whose places follow each other (all of them
  // until the first eviction, most of them after).
  const Impl& im = *impl_;
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

Result<std::vector<bool>> ShareStore::Holes(std::uint64_t first, std::uint64_t count) const {
  return impl_->Holes(first, count);
}

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

bool ShareStore::rebuilding() const { return impl_->rebuilding; }

Status ShareStore::WriteBuckets(std::uint64_t first, std::span<const Elem> data) {
  Impl& im = *impl_;
  S3ORAM_RETURN_IF_ERROR(im.Usable());
  if (!im.rebuilding) {
    return Status::FailedPrecondition("WriteBuckets: store is not being rebuilt");
  }
  return im.WriteWholeBuckets(first, data, im.rebuild_path, "WriteBuckets", "rebuilt bucket data");
}

Status ShareStore::CheckUnused() const {
  const Impl& im = *impl_;
  if (meta_.applied_seq != 0 || meta_.applied_evictions != 0 ||
      im.shadow_state != Impl::ShadowState::kNone || im.root_snapshot != 0) {
    return Status::FailedPrecondition(
        "age fill: the tree in " + im.dir + " has been used (" + std::to_string(meta_.applied_seq) +
        " accesses, " + std::to_string(meta_.applied_evictions) +
        " evictions applied); filling would overwrite its blocks, so it is only for a new "
        "filesystem");
  }
  return Status::Ok();
}

Status ShareStore::FillUnusedBuckets(std::uint64_t first, std::span<const Elem> data) {
  Impl& im = *impl_;
  S3ORAM_RETURN_IF_ERROR(im.Live());
  S3ORAM_RETURN_IF_ERROR(CheckUnused());
  S3ORAM_RETURN_IF_ERROR(
      im.WriteWholeBuckets(first, data, im.shares_path, "FillUnusedBuckets", "age fill data"));
  return im.Sync(im.fd.get(), im.shares_path);
}

Status ShareStore::FinishRebuild(const ServerMeta& meta) {
  Impl& im = *impl_;
  S3ORAM_RETURN_IF_ERROR(im.Usable());
  if (!im.rebuilding) {
    return Status::FailedPrecondition("FinishRebuild: store is not being rebuilt");
  }
  if (meta.fs_id != meta_.fs_id || meta.server_index != meta_.server_index ||
      !(meta.shape == meta_.shape)) {
    return Status::InvalidArgument("FinishRebuild cannot change the store's identity or shape");
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
  meta_ = meta;
  if (::rename(im.rebuild_path.c_str(), im.shares_path.c_str()) != 0) {
    return SysError("renaming " + im.rebuild_path + " to", im.shares_path, errno);
  }
  if (im.sync) S3ORAM_RETURN_IF_ERROR(SyncDirectory(im.dir));
  im.rebuilding = false;
  return Status::Ok();
}

Status ShareStore::WriteSlot(std::uint64_t bucket, std::uint32_t slot, std::span<const Elem> data,
                             std::uint64_t seq, std::uint64_t epoch,
                             const std::function<Status()>& while_syncing) {
  S3ORAM_RETURN_IF_ERROR(impl_->Live());
  if (bucket < 1 || bucket > impl_->geo.num_buckets) {
    return Status::InvalidArgument("bucket " + std::to_string(bucket) + " out of range 1.." +
                                   std::to_string(impl_->geo.num_buckets));
  }
  if (slot >= meta_.shape.bucket_size) {
    return Status::InvalidArgument("slot " + std::to_string(slot) + " out of range 0.." +
                                   std::to_string(meta_.shape.bucket_size - 1));
  }
  if (data.size() != slot_elems()) {
    return Status::InvalidArgument("slot data has " + std::to_string(data.size()) +
                                   " elements, expected " + std::to_string(slot_elems()));
  }
  const std::uint64_t off =
      impl_->BucketOffset(bucket) + std::uint64_t{slot} * slot_elems() * sizeof(Elem);
  digest::SlotDigest digest{};
  if (!impl_->key->Digest(data, &digest)) {
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
      PwriteAll(impl_->fd.get(), data.data(), data.size_bytes(), off, impl_->shares_path));
  S3ORAM_RETURN_IF_ERROR(impl_->WriteDigests(impl_->fd.get(), impl_->shares_path,
                                             impl_->DigestOffset(bucket, slot), {&digest, 1}));
  FaultPoint("server.write_root.after_data");
  ServerMeta m = meta_;
  m.applied_seq = std::max(m.applied_seq, seq);
  m.epoch = std::max(m.epoch, epoch);
  S3ORAM_RETURN_IF_ERROR(impl_->WriteMeta(m, /*sync_now=*/false));
  if (while_syncing) {
    // meta_ changes only after both finished, so `while_syncing` sees the
    // header as it was (the new slot is in the page cache already).
    // The flush thread only syncs; the store's failure record is written here,
    // after the join, so nothing else in the store is shared with it.
    Impl& im = *impl_;
    auto sync = std::async(std::launch::async, [&im] {
      return im.sync ? DataSync(im.fd.get(), im.shares_path) : Status::Ok();
    });
    Status during = while_syncing();
    Status synced = sync.get();
    if (!synced.ok()) {
      im.SetFailure(synced.message());
      return synced;
    }
    meta_ = m;
    return during;
  }
  S3ORAM_RETURN_IF_ERROR(impl_->Sync(impl_->fd.get(), impl_->shares_path));
  meta_ = m;
  return Status::Ok();
}

Status ShareStore::BeginShadow(std::uint64_t eviction, std::uint32_t attempt,
                               std::span<const std::uint64_t> buckets) {
  Impl& im = *impl_;
  S3ORAM_RETURN_IF_ERROR(im.Live());
  if (eviction != meta_.applied_evictions) {
    return Status::FailedPrecondition("cannot prepare eviction " + std::to_string(eviction) +
                                      ": the store has applied " +
                                      std::to_string(meta_.applied_evictions) + " evictions");
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
  im.SetShadowState(Impl::ShadowState::kNone);

  ShadowHeader h;
  h.sealed = false;
  h.fs_id = meta_.fs_id;
  h.shape = meta_.shape;
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
  im.SetShadowState(Impl::ShadowState::kOpen);
  return Status::Ok();
}

Status ShareStore::PutShadowBucket(std::size_t i, std::span<const Elem> data,
                                   std::span<const digest::SlotDigest> digests) {
  Impl& im = *impl_;
  S3ORAM_RETURN_IF_ERROR(im.Usable());
  if (im.shadow_state != Impl::ShadowState::kOpen) {
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

std::span<const digest::SlotDigest> ShareStore::ShadowBucketDigests(std::size_t i) const {
  const Impl& im = *impl_;
  assert(i < im.shadow.buckets.size() && "shadow bucket index out of range; callers validate");
  return std::span<const digest::SlotDigest>(im.shadow_digests).subspan(i * im.geo.z, im.geo.z);
}

Status ShareStore::SealShadow() {
  Impl& im = *impl_;
  S3ORAM_RETURN_IF_ERROR(im.Usable());
  if (im.shadow_state == Impl::ShadowState::kSealed) return Status::Ok();
  if (im.shadow_state != Impl::ShadowState::kOpen) {
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
  im.SetShadowState(Impl::ShadowState::kSealed);
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

Status ShareStore::SnapshotRoot(std::uint64_t eviction) {
  Impl& im = *impl_;
  S3ORAM_RETURN_IF_ERROR(im.Live());
  if (eviction != meta_.applied_evictions) {
    return Status::FailedPrecondition("cannot snapshot the root for eviction " +
                                      std::to_string(eviction) + ": the store has applied " +
                                      std::to_string(meta_.applied_evictions) + " evictions");
  }
  if (im.root_snapshot == eviction + 1) return Status::Ok();
  // The live root is checked before it is copied: damage must not move into
  // the snapshot under a fresh digest (the stored digests go with it).
  const auto* root = reinterpret_cast<const Elem*>(im.map + im.BucketOffset(1));
  S3ORAM_RETURN_IF_ERROR(VerifyBuckets(1, {root, bucket_elems()}));
  return im.WriteRootFile(meta_.fs_id, eviction, root,
                          {im.StoredDigests(1), im.StoredDigests(1) + im.geo.z});
}

Status ShareStore::WriteRootSnapshot(std::uint64_t eviction, std::span<const Elem> data) {
  Impl& im = *impl_;
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
  return im.WriteRootFile(meta_.fs_id, eviction, data.data(), std::move(d));
}

std::uint64_t ShareStore::RootSnapshotEviction() const { return impl_->root_snapshot; }

Status ShareStore::ReadRootSnapshot(std::uint64_t eviction, std::span<Elem> out) const {
  const Impl& im = *impl_;
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
      return Status::Damaged("server " + std::to_string(meta_.server_index) + ": slot " +
                             std::to_string(q) + " of the root snapshot in " + im.root_path +
                             " does not match its digest (the disk changed it); the eviction "
                             "cannot run until the server is rebuilt (s3oram rebuild)");
    }
  }
  return Status::Ok();
}

std::span<const digest::SlotDigest> ShareStore::RootSnapshotDigests() const {
  return impl_->root_digests;
}

bool ShareStore::HoldsPendingRootSnapshot() const {
  return impl_->root_snapshot != 0 && impl_->root_snapshot == meta_.applied_evictions + 1;
}

Result<std::vector<std::uint8_t>> ShareStore::ScrubRootSnapshot(
    const digest::DigestKey* public_key, std::vector<digest::SlotDigest>* out_digests) const {
  const Impl& im = *impl_;
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

Result<std::vector<Elem>> ShareStore::RootSnapshotSlot(std::uint32_t slot) const {
  if (!HoldsPendingRootSnapshot()) {
    return Status::NotFound("no root snapshot of a pending eviction");
  }
  if (slot >= impl_->geo.z) return Status::InvalidArgument("root snapshot slot out of range");
  std::vector<Elem> root(bucket_elems());
  S3ORAM_RETURN_IF_ERROR(ReadRootSnapshot(meta_.applied_evictions, root));
  const std::size_t m = slot_elems();
  return std::vector<Elem>(root.begin() + static_cast<std::ptrdiff_t>(slot * m),
                           root.begin() + static_cast<std::ptrdiff_t>((slot + 1) * m));
}

ShareStore::FileRange ShareStore::BucketInFile(std::uint64_t b) const {
  assert(b >= 1 && b <= impl_->geo.num_buckets && "bucket out of range; callers validate");
  return {impl_->BucketOffset(b), impl_->DigestOffset(b)};
}

std::vector<ShareStore::FileRange> ShareStore::ShadowInFile() const {
  const Impl& im = *impl_;
  std::vector<FileRange> out;
  if (im.shadow_state == Impl::ShadowState::kNone) return out;
  for (const std::uint32_t q : im.shadow_places) {
    out.push_back({im.PlaceOffset(q), im.PlaceDigestOffset(q)});
  }
  return out;
}

Result<std::vector<ShareStore::FileRange>> ShareStore::InspectFile(const std::string& shares_path,
                                                                   std::vector<FileRange>* places) {
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
  Impl im;
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

std::uint64_t ShareStore::SealedEviction() const {
  const Impl& im = *impl_;
  if (im.shadow_state != Impl::ShadowState::kSealed) return 0;
  return im.shadow.eviction + 1;
}

Status ShareStore::Commit(std::uint64_t eviction, std::uint64_t seq, std::uint64_t epoch) {
  Impl& im = *impl_;
  // Already applied (possibly by a commit whose reply was lost): nothing to do.
  if (eviction < meta_.applied_evictions) return Status::Ok();
  S3ORAM_RETURN_IF_ERROR(im.Live());
  if (im.shadow_state != Impl::ShadowState::kSealed || im.shadow.eviction != eviction) {
    std::string have =
        im.shadow_state == Impl::ShadowState::kSealed
            ? "the sealed shadow is for eviction " + std::to_string(im.shadow.eviction)
            : "no shadow is sealed";
    return Status::FailedPrecondition("cannot commit eviction " + std::to_string(eviction) + ": " +
                                      have);
  }
  // BeginShadow and Open only admit a shadow for the next eviction.
  assert(eviction == meta_.applied_evictions);

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
              "server " + std::to_string(meta_.server_index) + ": the prepared eviction " +
              std::to_string(eviction) + " in " + im.shares_path + " is damaged (bucket " +
              std::to_string(im.shadow.buckets[i]) + " slot " + std::to_string(k) +
              " differs from what was written); it was not committed. This server must be "
              "repaired from the others: s3oram rebuild --server " +
              std::to_string(meta_.server_index));
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
  ServerMeta m = meta_;
  m.applied_evictions = eviction + 1;
  m.applied_seq = std::max(m.applied_seq, seq);
  m.epoch = std::max(m.epoch, epoch);
  S3ORAM_RETURN_IF_ERROR(impl_->WriteMeta(m));
  meta_ = m;
  im.places = std::move(next);
  // The shadow header stays; its eviction is now below applied_evictions,
  // so Open ignores it and the next BeginShadow overwrites it. The places
  // the old buckets held are the free ones now.
  im.SetShadowState(Impl::ShadowState::kNone);
  return Status::Ok();
}

}  // namespace s3oram::serverd

// The share store's byte formats on disk (ShareStore, share_store.h, says
// what it guarantees; its files use these helpers and nothing else does):
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
#pragma once

#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/field.h"
#include "oramcore/math/slot_digest.h"
#include "oramcore/wire/wire.h"
#include "serverd/server_meta.h"

namespace s3oram::serverd::store_format {

using field::Elem;

constexpr std::uint64_t kHeaderRegion = 4096;
// Present (durably) while a catch-up rewrites buckets of shares.bin in place
// (StoreRebuild::BeginCatchUp .. FinishRebuild): the file is then no
// sharing of any one state, and Open refuses it.
constexpr const char* kCatchUpMarker = "shares.bin.catchup";
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
void PutU32(std::uint8_t* p, std::uint32_t v);
void PutU64(std::uint8_t* p, std::uint64_t v);
std::uint32_t GetU32(const std::uint8_t* p);
std::uint64_t GetU64(const std::uint8_t* p);

// ---- system call wrappers: EINTR, short transfers, errno -> Status with path.
std::string ErrnoText(int e);

// A full disk is its own code: the client reports it as ENOSPC, and it
// clears once space is freed (nothing is damaged by a refused write).
Status SysError(const std::string& what, const std::string& path, int e);

Status PwriteAll(int fd, const void* buf, std::size_t n, std::uint64_t off,
                 const std::string& path);

// Corruption if the file ends early: every caller reads a range the header
// says exists.
Status PreadAll(int fd, void* buf, std::size_t n, std::uint64_t off, const std::string& path);

Status DataSync(int fd, const std::string& path);

// mkdir -p; directories it creates get mode 0700 (the shares are secret).
Status MakeDirs(const std::string& dir);

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

std::string ShapeText(const wire::StoreShape& s);

// Sizes implied by a shape, or why the shape is unusable. The file size must
// fit off_t, which also keeps every offset computed from it in range.
bool ComputeGeometry(const wire::StoreShape& s, Geometry* g, std::string* why);

void EncodeMeta(const ServerMeta& m, const digest::Seed& seed, std::uint64_t generation,
                std::uint8_t* rec);

// Decodes one meta copy of format 1 or 2 (*version says which; a format-1
// record has no seed); on failure sets *why.
bool DecodeMeta(const std::uint8_t* rec, ServerMeta* m, digest::Seed* seed, std::uint32_t* version,
                std::uint64_t* generation, std::string* why);

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

std::array<std::uint8_t, kRootHeaderBytes> EncodeRootHeader(const RootHeader& h);

// False if root.bin's header is absent, torn, incomplete or of another version.
bool ReadRootHeader(int fd, const std::string& path, RootHeader* h);

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

std::uint64_t ShadowDataOffset(std::size_t count);

std::vector<std::uint8_t> EncodeShadowHeader(const ShadowHeader& h);

// Reads shadow.bin's header. Returns false if it is absent, torn or from an
// unknown version: all of these mean "no usable shadow".
bool ReadShadowHeader(int fd, const std::string& path, ShadowHeader* h);

// One copy of the bucket map: places[b] for buckets b = 1..N (places[0]
// unused), recording eviction count `generation`.
std::vector<std::uint8_t> EncodeMap(std::uint64_t generation,
                                    const std::vector<std::uint32_t>& places,
                                    std::uint64_t copy_bytes);

// Decodes a map copy for `generation` of a tree of n buckets and `places`
// places; false (with *why) if it is torn, foreign, of another generation,
// or not a one-to-one map into 1..places.
bool DecodeMap(std::span<const std::uint8_t> in, std::uint64_t generation, std::uint64_t n,
               std::uint64_t places, std::vector<std::uint32_t>* out, std::string* why);

}  // namespace s3oram::serverd::store_format

// ShareStore::Impl: the open share file, its mapping, the bucket map and the
// state of the shadow, for the share store's own files (share_store.cpp,
// share_store_scrub.cpp, share_store_rebuild.cpp, share_store_eviction.cpp,
// share_store_inspect.cpp), which implement ShareStore and its views (the
// views reach it as s_.impl_). The byte formats are in share_store_format.h.
#pragma once

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "oramcore/base/durable_file.h"
#include "oramcore/base/fault_point.h"
#include "oramcore/math/slot_digest.h"
#include "serverd/share_store.h"
#include "serverd/share_store_format.h"

namespace s3oram::serverd {

// The files of the share store read the formats unqualified.
using namespace store_format;  // NOLINT(google-build-using-namespace)

// Buckets are exposed as Elem* straight from the mmap, and elements are
// defined as 32-bit little-endian words.
static_assert(std::endian::native == std::endian::little,
              "the share file stores elements in host order; host must be little-endian");
static_assert(sizeof(Elem) == 4);

// Where the shadow is: none, being written (BeginShadow .. SealShadow), or
// sealed and waiting for Commit.
enum class ShadowState { kNone, kOpen, kSealed };

struct ShareStore::Impl {
  using ShadowState = serverd::ShadowState;

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
  // Set while the file is shares.bin.rebuild (CreateForRebuild .. FinishRebuild),
  // or while a catch-up rewrites shares.bin in place (BeginCatchUp ..
  // FinishRebuild; catching_up too, and rebuild_path is shares_path).
  bool rebuilding = false;
  bool catching_up = false;
  std::string rebuild_path;
  std::string CatchUpMarkerPath() const { return dir + "/" + kCatchUpMarker; }
  // The store as a catch-up's target (rebuilding and catching_up set), its
  // shadow and root snapshot dropped; the mark is already durable.
  Status EnterCatchUp();

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
  // file hole (LiveTree::Holes).
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

  // Open's steps once the current header copy `m` (of format `version`) is
  // chosen (share_store.cpp): the file's size against the shape, upgrading an
  // older format; then the sealed shadow and the root snapshot, each kept
  // only if it belongs to the eviction not yet applied.
  Status CheckSizeAndUpgrade(const ServerMeta& m, std::uint32_t version, std::uint64_t size);
  Status LoadSealedShadow(const ServerMeta& m);
  Status LoadRootSnapshot(const ServerMeta& m);

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

}  // namespace s3oram::serverd

#include "oramcore/state/sealed_vfs.h"

#include <sodium.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <new>

#include "oramcore/base/random.h"

namespace s3oram {
namespace {

static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == kSealedKeyBytes);
static_assert(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES +
                  crypto_aead_xchacha20poly1305_ietf_ABYTES ==
              kSealedReserveBytes);

constexpr std::size_t kP = kSealedPageBytes;
constexpr std::size_t kNonce = crypto_aead_xchacha20poly1305_ietf_NPUBBYTES;
constexpr std::size_t kPayload = kP - kSealedReserveBytes;
constexpr std::int64_t kWalHeader = 32;
constexpr std::int64_t kFrameHeader = 24;
constexpr std::int64_t kFrame = kFrameHeader + static_cast<std::int64_t>(kP);
// Byte 20 of a database's first page: the reserved bytes at the end of
// every page (SQLite file format, "Reserved bytes per page").
constexpr std::size_t kReserveByteOffset = 20;

enum class Kind : std::uint8_t { kDatabase = 1, kWal = 2 };

// ReadPage's result for a page whose tag does not verify; never returned to
// SQLite.
constexpr int kNotAuthentic = -1;

// Associated data: "s3st-db " or "s3st-wal" (8 bytes), then the page's
// position (its number in a database, the offset of its data in a log),
// then, for a log page of a bound file, bytes 0-15 of its frame header (page
// number, commit size, both salts: everything SQLite uses from a frame
// header but its checksum), so a frame cannot be relabelled, turned into a
// commit or moved into another log generation.
struct Ad {
  std::array<std::uint8_t, 32> bytes{};
  std::size_t size = 16;
};
Ad MakeAd(Kind kind, std::uint64_t position, const std::uint8_t* frame_header) {
  Ad ad;
  const char* label = kind == Kind::kDatabase ? "s3st-db " : "s3st-wal";
  std::memcpy(ad.bytes.data(), label, 8);
  for (int i = 0; i < 8; ++i) ad.bytes[8 + i] = static_cast<std::uint8_t>(position >> (8 * i));
  if (frame_header != nullptr) {
    std::memcpy(ad.bytes.data() + 16, frame_header, 16);
    ad.size = 32;
  }
  return ad;
}

}  // namespace

struct SealedVfsState {
  sqlite3_vfs vfs{};
  sqlite3_vfs* real = nullptr;
  Secret key;
  mutable std::mutex mu;
  std::vector<std::uint8_t> new_file_header;  // guarded by mu
  std::string last_error;                     // guarded by mu
  void Fail(std::string message) {
    std::lock_guard<std::mutex> lock(mu);
    last_error = std::move(message);
  }
  // The key of a bound file: keyed BLAKE2b of its binding nonce under the
  // VFS's key, so no two files share a page key.
  void FileKey(const std::uint8_t* binding, std::uint8_t* out) const {
    static constexpr char kLabel[] = "s3oram sealed file v2";
    crypto_generichash_state st;
    crypto_generichash_init(&st, key.data(), key.size(), kSealedKeyBytes);
    crypto_generichash_update(&st, reinterpret_cast<const std::uint8_t*>(kLabel), sizeof kLabel);
    crypto_generichash_update(&st, binding, kSealedBindingBytes);
    crypto_generichash_final(&st, out, kSealedKeyBytes);
    sodium_memzero(&st, sizeof st);
  }
};

namespace {

struct SealedFile {
  sqlite3_file base;  // first: SQLite sees this
  SealedVfsState* impl;
  Kind kind;
  // A bound file (format 2) has a key of its own and authenticates its log's
  // frame headers; a legacy one (format 1) uses the VFS's key as it is.
  bool bound;
  std::uint8_t key[kSealedKeyBytes];
  sqlite3_file* real;  // the underlying VFS's file, right after this struct

  // Seals kPayload bytes of `plain` into the kP bytes of `out`.
  void Seal(std::uint64_t position, const std::uint8_t* frame_header, const std::uint8_t* plain,
            std::uint8_t* out) const {
    const Ad ad = MakeAd(kind, position, bound ? frame_header : nullptr);
    std::uint8_t* nonce = out + kPayload;
    std::uint8_t* tag = out + kPayload + kNonce;
    random::Bytes(std::span<std::uint8_t>(nonce, kNonce));
    crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
        out, tag, nullptr, plain, kPayload, ad.bytes.data(), ad.size, nullptr, nonce, key);
  }
  // Opens a sealed page in place; the reserved bytes are zeroed on success.
  bool Open(std::uint64_t position, const std::uint8_t* frame_header, std::uint8_t* page) const {
    const Ad ad = MakeAd(kind, position, bound ? frame_header : nullptr);
    const std::uint8_t* nonce = page + kPayload;
    const std::uint8_t* tag = page + kPayload + kNonce;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt_detached(
            page, nullptr, page, kPayload, tag, ad.bytes.data(), ad.size, nonce, key) != 0) {
      return false;
    }
    std::memset(page + kPayload, 0, kSealedReserveBytes);
    return true;
  }
};

SealedVfsState* ImplOf(sqlite3_file* file) { return reinterpret_cast<SealedFile*>(file)->impl; }

std::string FileName(const SealedFile* f) {
  return f->kind == Kind::kDatabase ? "the state database" : "the state's write-ahead log";
}

// ---- one page region of a file -------------------------------------------

// Bytes 0-15 of the header of the log frame whose page starts at real
// offset `page_at` (SQLite writes a frame's header before its page);
// nullptr for a database page or a legacy file, whose associated data has
// none. SQLite rewrites a frame header in place in one case: a transaction
// larger than the page cache spills pages into the log before its commit,
// and once it has rewritten such a page in place, it writes its later
// frames with salts and checksum zeroed and fills both in at the commit
// (walRewriteChecksums). The salts it fills in are the log header's (bytes
// 16-23), which every valid frame of this log generation carries, so a
// frame header with zero salts is read with the log header's: the page is
// sealed under the salts its frame will have, and a frame of an older
// generation (other salts) still fails.
int FrameHeaderFor(SealedFile* f, sqlite3_int64 page_at, std::uint8_t* out, bool* have) {
  *have = false;
  if (f->kind != Kind::kWal || !f->bound) return SQLITE_OK;
  int rc = f->real->pMethods->xRead(f->real, out, 16, page_at - kFrameHeader);
  if (rc != SQLITE_OK) return rc == SQLITE_IOERR_SHORT_READ ? SQLITE_IOERR_DATA : rc;
  static constexpr std::uint8_t kNoSalts[8] = {};
  if (std::memcmp(out + 8, kNoSalts, sizeof kNoSalts) == 0) {
    rc = f->real->pMethods->xRead(f->real, out + 8, 8, 16);
    if (rc != SQLITE_OK) return rc == SQLITE_IOERR_SHORT_READ ? SQLITE_IOERR_DATA : rc;
  }
  *have = true;
  return SQLITE_OK;
}

// Reads the sealed page at real offset `at` into `page` (kP bytes) and opens
// it. Returns SQLITE_OK, SQLITE_IOERR_SHORT_READ (no byte of it exists: the
// page is past the end; `page` is zeros), kNotAuthentic or an error.
int ReadPage(SealedFile* f, sqlite3_int64 at, std::uint64_t position, std::uint8_t* page) {
  SealedVfsState* impl = f->impl;
  int rc = f->real->pMethods->xRead(f->real, page, static_cast<int>(kP), at);
  if (rc == SQLITE_IOERR_SHORT_READ) {
    // Past the end is normal (SQLite probes); a page only partly there was
    // cut short, and must never reach SQLite as zeros.
    sqlite3_int64 size = 0;
    if (f->real->pMethods->xFileSize(f->real, &size) == SQLITE_OK && size <= at) {
      std::memset(page, 0, kP);
      return SQLITE_IOERR_SHORT_READ;
    }
    impl->Fail(FileName(f) + " ends inside page " + std::to_string(position) +
               " (it was truncated)");
    return SQLITE_IOERR_DATA;
  }
  if (rc != SQLITE_OK) return rc;
  std::uint8_t frame_header[16];
  bool have = false;
  if (FrameHeaderFor(f, at, frame_header, &have) != SQLITE_OK) return kNotAuthentic;
  if (!f->Open(position, have ? frame_header : nullptr, page)) return kNotAuthentic;
  return SQLITE_OK;
}

void FailAuthentication(SealedFile* f, std::uint64_t position, sqlite3_int64 at) {
  f->impl->Fail(FileName(f) + " failed authentication at " +
                (f->kind == Kind::kDatabase ? "page " + std::to_string(position) + " (byte offset "
                                            : std::string("byte offset ")) +
                std::to_string(at) + (f->kind == Kind::kDatabase ? ")" : "") +
                ": it was modified or damaged, or the key is not this filesystem's");
}

std::uint32_t BigEndian32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// Whether the log frame starting at `frame_start`, whose page failed
// authentication, is a write a killed process left unfinished rather than
// damage to committed history.
//
// A page image is one 4096-byte write at an offset that is never aligned to
// the kernel's pages, and a SIGKILL may stop such a write between two of
// them: the frame then holds part of the new image and part of whatever was
// there (an older log generation's frame). SQLite's recovery rejects such a
// frame by its checksum and discards it and everything after it, which is
// safe exactly when no committed transaction follows it. Frames are
// appended in order and rewritten in place only after the last commit, and
// a commit frame is always appended, so in a log left by a kill the torn
// frame is the newest write: no frame after it carries this log
// generation's salt and a commit marker. A damaged frame with such a
// commit after it is refused; a damaged newest frame is indistinguishable
// from a torn one and is discarded, as truncating the log would do.
bool IsTornTail(SealedFile* f, sqlite3_int64 frame_start) {
  std::uint8_t wal_header[kWalHeader];
  if (f->real->pMethods->xRead(f->real, wal_header, sizeof wal_header, 0) != SQLITE_OK) {
    return false;
  }
  const std::uint8_t* salt = wal_header + 16;
  std::uint8_t frame_header[kFrameHeader];
  if (f->real->pMethods->xRead(f->real, frame_header, sizeof frame_header, frame_start) !=
      SQLITE_OK) {
    return false;
  }
  // A frame of another generation is rejected by SQLite before its page is
  // used; its content does not matter.
  if (std::memcmp(frame_header + 8, salt, 8) != 0) return true;
  sqlite3_int64 size = 0;
  if (f->real->pMethods->xFileSize(f->real, &size) != SQLITE_OK) return false;
  for (sqlite3_int64 at = frame_start + kFrame; at + kFrameHeader <= size; at += kFrame) {
    if (f->real->pMethods->xRead(f->real, frame_header, sizeof frame_header, at) != SQLITE_OK) {
      return false;
    }
    if (std::memcmp(frame_header + 8, salt, 8) == 0 && BigEndian32(frame_header + 4) != 0) {
      return false;
    }
  }
  return true;
}

// Where a logical byte range falls: a sealed page (real offset of its start,
// its position for the associated data) or clear bytes (WAL headers).
struct Region {
  bool sealed = false;
  sqlite3_int64 real_start = 0;  // of the page, or of the clear bytes
  std::uint64_t position = 0;
  sqlite3_int64 length = 0;  // kP for a page, else the clear run's length
  sqlite3_int64 logical_start = 0;
};

Region RegionAt(const SealedFile* f, sqlite3_int64 off) {
  Region r;
  if (f->kind == Kind::kDatabase) {
    const sqlite3_int64 k = off / static_cast<sqlite3_int64>(kP);
    r.sealed = true;
    r.logical_start = k * static_cast<sqlite3_int64>(kP);
    r.real_start = r.logical_start + static_cast<sqlite3_int64>(kSealedHeaderBytes);
    r.position = static_cast<std::uint64_t>(k) + 1;  // SQLite numbers pages from 1
    r.length = static_cast<sqlite3_int64>(kP);
    return r;
  }
  if (off < kWalHeader) {
    r.logical_start = r.real_start = 0;
    r.length = kWalHeader;
    return r;
  }
  const sqlite3_int64 frame = (off - kWalHeader) / kFrame;
  const sqlite3_int64 frame_start = kWalHeader + frame * kFrame;
  if (off < frame_start + kFrameHeader) {
    r.logical_start = r.real_start = frame_start;
    r.length = kFrameHeader;
    return r;
  }
  r.sealed = true;
  r.logical_start = r.real_start = frame_start + kFrameHeader;
  r.position = static_cast<std::uint64_t>(r.real_start);
  r.length = static_cast<sqlite3_int64>(kP);
  return r;
}

// ---- io methods -------------------------------------------------------------

int SealedClose(sqlite3_file* file) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  int rc = SQLITE_OK;
  if (f->real->pMethods != nullptr) rc = f->real->pMethods->xClose(f->real);
  sodium_memzero(f->key, sizeof f->key);
  return rc;
}

int SealedRead(sqlite3_file* file, void* out, int amount, sqlite3_int64 offset) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  auto* dst = static_cast<std::uint8_t*>(out);
  std::array<std::uint8_t, kP> page;
  bool short_read = false;
  sqlite3_int64 off = offset;
  const sqlite3_int64 end = offset + amount;
  while (off < end) {
    const Region r = RegionAt(f, off);
    const sqlite3_int64 in_region = off - r.logical_start;
    const sqlite3_int64 n = std::min(end - off, r.length - in_region);
    if (r.sealed) {
      int rc = ReadPage(f, r.real_start, r.position, page.data());
      if (rc == SQLITE_IOERR_SHORT_READ) {
        std::memset(dst + (off - offset), 0, static_cast<std::size_t>(end - off));
        short_read = true;
        break;
      }
      if (rc == kNotAuthentic) {
        // Recovery reads whole frames, header first; a torn newest frame is
        // handed to it with its salt spoilt, so SQLite rejects it for
        // certain rather than by a checksum that might match zeros.
        const sqlite3_int64 frame_start = r.real_start - kFrameHeader;
        if (f->kind == Kind::kWal && offset <= frame_start && IsTornTail(f, frame_start)) {
          std::memset(dst + (off - offset), 0, static_cast<std::size_t>(n));
          dst[frame_start - offset + 8] ^= 0xff;  // salt-1
          off += n;
          continue;
        }
        FailAuthentication(f, r.position, r.real_start);
        rc = SQLITE_IOERR_DATA;
      }
      if (rc != SQLITE_OK) {
        sodium_memzero(page.data(), page.size());
        return rc;
      }
      std::memcpy(dst + (off - offset), page.data() + in_region, static_cast<std::size_t>(n));
    } else {
      const int rc = f->real->pMethods->xRead(f->real, dst + (off - offset), static_cast<int>(n),
                                              r.real_start + in_region);
      if (rc == SQLITE_IOERR_SHORT_READ) {
        std::memset(dst + (off - offset), 0, static_cast<std::size_t>(end - off));
        short_read = true;
        break;
      }
      if (rc != SQLITE_OK) return rc;
    }
    off += n;
  }
  sodium_memzero(page.data(), page.size());
  return short_read ? SQLITE_IOERR_SHORT_READ : SQLITE_OK;
}

int SealedWrite(sqlite3_file* file, const void* in, int amount, sqlite3_int64 offset) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  SealedVfsState* impl = ImplOf(file);
  const auto* src = static_cast<const std::uint8_t*>(in);
  std::array<std::uint8_t, kP> sealed;
  sqlite3_int64 off = offset;
  const sqlite3_int64 end = offset + amount;
  while (off < end) {
    const Region r = RegionAt(f, off);
    const sqlite3_int64 in_region = off - r.logical_start;
    const sqlite3_int64 n = std::min(end - off, r.length - in_region);
    if (r.sealed) {
      // SQLite writes whole pages to databases and logs; a part of one could
      // only be sealed by reading the rest, and never happens.
      if (in_region != 0 || n != static_cast<sqlite3_int64>(kP)) {
        impl->Fail(FileName(f) + ": a write of part of a page (offset " + std::to_string(off) +
                   ", " + std::to_string(n) + " bytes) cannot be sealed");
        return SQLITE_IOERR_WRITE;
      }
      const std::uint8_t* plain = src + (off - offset);
      if (f->kind == Kind::kDatabase && r.position == 1 &&
          plain[kReserveByteOffset] != kSealedReserveBytes) {
        impl->Fail(FileName(f) + " does not reserve " + std::to_string(kSealedReserveBytes) +
                   " bytes per page for sealing; refusing to write it");
        return SQLITE_IOERR_WRITE;
      }
      std::uint8_t frame_header[16];
      bool have = false;
      if (const int rc = FrameHeaderFor(f, r.real_start, frame_header, &have); rc != SQLITE_OK) {
        impl->Fail(FileName(f) + ": a page written before its frame header (offset " +
                   std::to_string(off) + ") cannot be sealed");
        return SQLITE_IOERR_WRITE;
      }
      f->Seal(r.position, have ? frame_header : nullptr, plain, sealed.data());
      const int rc =
          f->real->pMethods->xWrite(f->real, sealed.data(), static_cast<int>(kP), r.real_start);
      if (rc != SQLITE_OK) return rc;
    } else {
      const int rc = f->real->pMethods->xWrite(f->real, src + (off - offset), static_cast<int>(n),
                                               r.real_start + in_region);
      if (rc != SQLITE_OK) return rc;
    }
    off += n;
  }
  return SQLITE_OK;
}

sqlite3_int64 HeaderShift(const SealedFile* f) {
  return f->kind == Kind::kDatabase ? static_cast<sqlite3_int64>(kSealedHeaderBytes) : 0;
}

int SealedTruncate(sqlite3_file* file, sqlite3_int64 size) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  return f->real->pMethods->xTruncate(f->real, size + HeaderShift(f));
}

int SealedSync(sqlite3_file* file, int flags) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  return f->real->pMethods->xSync(f->real, flags);
}

int SealedFileSize(sqlite3_file* file, sqlite3_int64* size) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  sqlite3_int64 real = 0;
  const int rc = f->real->pMethods->xFileSize(f->real, &real);
  if (rc != SQLITE_OK) return rc;
  *size = std::max<sqlite3_int64>(0, real - HeaderShift(f));
  return SQLITE_OK;
}

int SealedLock(sqlite3_file* file, int level) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  return f->real->pMethods->xLock(f->real, level);
}
int SealedUnlock(sqlite3_file* file, int level) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  return f->real->pMethods->xUnlock(f->real, level);
}
int SealedCheckReservedLock(sqlite3_file* file, int* out) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  return f->real->pMethods->xCheckReservedLock(f->real, out);
}

int SealedFileControl(sqlite3_file* file, int op, void* arg) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  switch (op) {
    case SQLITE_FCNTL_SIZE_HINT: {
      sqlite3_int64 hint = *static_cast<sqlite3_int64*>(arg) + HeaderShift(f);
      return f->real->pMethods->xFileControl(f->real, op, &hint);
    }
    case SQLITE_FCNTL_MMAP_SIZE:
      // Pages must pass through xRead to be opened: never map the file.
      *static_cast<sqlite3_int64*>(arg) = 0;
      return SQLITE_OK;
    case SQLITE_FCNTL_VFSNAME: {
      *static_cast<char**>(arg) = sqlite3_mprintf("%s", ImplOf(file)->vfs.zName);
      return SQLITE_OK;
    }
    default:
      return f->real->pMethods->xFileControl(f->real, op, arg);
  }
}

int SealedSectorSize(sqlite3_file* file) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  return f->real->pMethods->xSectorSize(f->real);
}
int SealedDeviceCharacteristics(sqlite3_file* file) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  // Atomic-write claims would let SQLite skip the WAL's or journal's
  // protection; sealing changes every byte of a page, so promise nothing
  // beyond safe appends.
  const int real = f->real->pMethods->xDeviceCharacteristics(f->real);
  return real & (SQLITE_IOCAP_SAFE_APPEND | SQLITE_IOCAP_SEQUENTIAL |
                 SQLITE_IOCAP_POWERSAFE_OVERWRITE | SQLITE_IOCAP_UNDELETABLE_WHEN_OPEN);
}

int SealedShmMap(sqlite3_file* file, int region, int size, int extend, void volatile** pp) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  return f->real->pMethods->xShmMap(f->real, region, size, extend, pp);
}
int SealedShmLock(sqlite3_file* file, int offset, int n, int flags) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  return f->real->pMethods->xShmLock(f->real, offset, n, flags);
}
void SealedShmBarrier(sqlite3_file* file) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  f->real->pMethods->xShmBarrier(f->real);
}
int SealedShmUnmap(sqlite3_file* file, int delete_flag) {
  auto* f = reinterpret_cast<SealedFile*>(file);
  return f->real->pMethods->xShmUnmap(f->real, delete_flag);
}

// Version 2: shared memory for WAL, no xFetch (memory mapping would bypass
// xRead and hand SQLite sealed bytes).
const sqlite3_io_methods kSealedMethods = {
    2,
    SealedClose,
    SealedRead,
    SealedWrite,
    SealedTruncate,
    SealedSync,
    SealedFileSize,
    SealedLock,
    SealedUnlock,
    SealedCheckReservedLock,
    SealedFileControl,
    SealedSectorSize,
    SealedDeviceCharacteristics,
    SealedShmMap,
    SealedShmLock,
    SealedShmBarrier,
    SealedShmUnmap,
    nullptr,
    nullptr,
};

// ---- vfs methods ------------------------------------------------------------

SealedVfsState* ImplOfVfs(sqlite3_vfs* vfs) { return static_cast<SealedVfsState*>(vfs->pAppData); }

std::uint32_t LittleEndian32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) |
         (std::uint32_t{p[3]} << 24);
}

// How the database file with this header (at least its first
// kSealedBindingOffset + kSealedBindingBytes bytes) is sealed.
int Bind(SealedFile* f, const std::vector<std::uint8_t>& header) {
  const std::uint32_t format = LittleEndian32(header.data() + kSealedFormatOffset);
  if (format == kSealedLegacyFormat) {
    f->bound = false;
    std::memcpy(f->key, f->impl->key.data(), sizeof f->key);
    return SQLITE_OK;
  }
  if (format == kSealedBoundFormat) {
    f->bound = true;
    f->impl->FileKey(header.data() + kSealedBindingOffset, f->key);
    return SQLITE_OK;
  }
  f->impl->Fail("the state file's header names format " + std::to_string(format) +
                ", which this build does not seal");
  return SQLITE_CANTOPEN;
}

int SealedOpen(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags) {
  SealedVfsState* impl = ImplOfVfs(vfs);
  auto* f = reinterpret_cast<SealedFile*>(file);
  f->base.pMethods = nullptr;
  Kind kind;
  if (flags & SQLITE_OPEN_MAIN_DB) {
    kind = Kind::kDatabase;
  } else if (flags & SQLITE_OPEN_WAL) {
    kind = Kind::kWal;
  } else {
    // Rollback journals, temporary databases, statement journals: each
    // would hold page images in clear. WAL mode and temp_store=MEMORY need
    // none of them, so one being asked for is a configuration error.
    impl->Fail(std::string("refusing to create a ") +
               ((flags & SQLITE_OPEN_MAIN_JOURNAL) ? "rollback journal" : "temporary file") +
               " for a sealed database (it would be written in clear)");
    return SQLITE_CANTOPEN;
  }
  if (name == nullptr) {
    impl->Fail("refusing an unnamed database file");
    return SQLITE_CANTOPEN;
  }
  f->impl = impl;
  f->kind = kind;
  f->bound = false;
  sodium_memzero(f->key, sizeof f->key);
  f->real =
      reinterpret_cast<sqlite3_file*>(reinterpret_cast<std::uint8_t*>(f) + sizeof(SealedFile));
  f->real->pMethods = nullptr;
  int rc = impl->real->xOpen(impl->real, name, f->real, flags, out_flags);
  if (rc != SQLITE_OK) {
    if (f->real->pMethods != nullptr) f->real->pMethods->xClose(f->real);
    f->real->pMethods = nullptr;
    return rc;
  }
  if (kind == Kind::kDatabase) {
    sqlite3_int64 size = 0;
    std::vector<std::uint8_t> header;
    rc = f->real->pMethods->xFileSize(f->real, &size);
    if (rc == SQLITE_OK && size == 0 && !(flags & SQLITE_OPEN_READONLY)) {
      {
        std::lock_guard<std::mutex> lock(impl->mu);
        header = impl->new_file_header;
      }
      if (header.size() != kSealedHeaderBytes) {
        impl->Fail("refusing to create a sealed database without its header");
        rc = SQLITE_CANTOPEN;
      } else {
        rc = f->real->pMethods->xWrite(f->real, header.data(), static_cast<int>(header.size()), 0);
      }
    } else if (rc == SQLITE_OK && size < static_cast<sqlite3_int64>(kSealedHeaderBytes)) {
      impl->Fail("the state file is shorter than its header (" + std::to_string(size) +
                 " bytes): it was truncated");
      rc = SQLITE_CANTOPEN;
    } else if (rc == SQLITE_OK) {
      header.resize(kSealedBindingOffset + kSealedBindingBytes);
      rc = f->real->pMethods->xRead(f->real, header.data(), static_cast<int>(header.size()), 0);
    }
    if (rc == SQLITE_OK) rc = Bind(f, header);
    if (rc != SQLITE_OK) {
      f->real->pMethods->xClose(f->real);
      f->real->pMethods = nullptr;
      return rc;
    }
  } else {
    // A log belongs to its database, opened first through this VFS: it is
    // sealed under that file's key and binding.
    sqlite3_file* db = sqlite3_database_file_object(name);
    if (db == nullptr || db->pMethods != &kSealedMethods) {
      impl->Fail("refusing a write-ahead log whose database was not opened through this VFS");
      f->real->pMethods->xClose(f->real);
      f->real->pMethods = nullptr;
      return SQLITE_CANTOPEN;
    }
    const auto* owner = reinterpret_cast<const SealedFile*>(db);
    f->bound = owner->bound;
    std::memcpy(f->key, owner->key, sizeof f->key);
  }
  f->base.pMethods = &kSealedMethods;
  return SQLITE_OK;
}

int SealedDelete(sqlite3_vfs* vfs, const char* name, int sync_dir) {
  sqlite3_vfs* real = ImplOfVfs(vfs)->real;
  return real->xDelete(real, name, sync_dir);
}
int SealedAccess(sqlite3_vfs* vfs, const char* name, int flags, int* out) {
  sqlite3_vfs* real = ImplOfVfs(vfs)->real;
  return real->xAccess(real, name, flags, out);
}
int SealedFullPathname(sqlite3_vfs* vfs, const char* name, int n, char* out) {
  sqlite3_vfs* real = ImplOfVfs(vfs)->real;
  return real->xFullPathname(real, name, n, out);
}
void* SealedDlOpen(sqlite3_vfs*, const char*) { return nullptr; }
void SealedDlError(sqlite3_vfs*, int n, char* out) {
  sqlite3_snprintf(n, out, "extensions are not loaded by sealed databases");
}
void (*SealedDlSym(sqlite3_vfs*, void*, const char*))(void) { return nullptr; }
void SealedDlClose(sqlite3_vfs*, void*) {}
int SealedRandomness(sqlite3_vfs*, int n, char* out) {
  random::Bytes(
      std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(out), static_cast<std::size_t>(n)));
  return n;
}
int SealedSleep(sqlite3_vfs* vfs, int micros) {
  sqlite3_vfs* real = ImplOfVfs(vfs)->real;
  return real->xSleep(real, micros);
}
int SealedCurrentTime(sqlite3_vfs* vfs, double* out) {
  sqlite3_vfs* real = ImplOfVfs(vfs)->real;
  return real->xCurrentTime(real, out);
}
int SealedGetLastError(sqlite3_vfs* vfs, int n, char* out) {
  sqlite3_vfs* real = ImplOfVfs(vfs)->real;
  return real->xGetLastError(real, n, out);
}
int SealedCurrentTimeInt64(sqlite3_vfs* vfs, sqlite3_int64* out) {
  sqlite3_vfs* real = ImplOfVfs(vfs)->real;
  return real->xCurrentTimeInt64(real, out);
}

std::atomic<std::uint64_t> g_vfs_counter{0};

}  // namespace

Result<std::unique_ptr<SealedVfs>> SealedVfs::Create(Secret key,
                                                     std::vector<std::uint8_t> new_file_header) {
  if (key.size() != kSealedKeyBytes) {
    return Status::InvalidArgument("SealedVfs: the key must be " + std::to_string(kSealedKeyBytes) +
                                   " bytes");
  }
  if (!new_file_header.empty() && new_file_header.size() != kSealedHeaderBytes) {
    return Status::InvalidArgument("SealedVfs: the header must be " +
                                   std::to_string(kSealedHeaderBytes) + " bytes");
  }
  if (const int rc = sqlite3_initialize(); rc != SQLITE_OK) {
    return Status::IoError(std::string("sqlite3_initialize: ") + sqlite3_errstr(rc));
  }
  sqlite3_vfs* real = sqlite3_vfs_find(nullptr);
  if (real == nullptr || real->iVersion < 2) {
    return Status::Unavailable("SQLite has no default VFS of version 2 or later");
  }
  std::unique_ptr<SealedVfs> v(new SealedVfs());
  v->impl_ = std::make_unique<SealedVfsState>();
  SealedVfsState& impl = *v->impl_;
  impl.real = real;
  impl.key = std::move(key);
  impl.new_file_header = std::move(new_file_header);
  v->name_ = "s3oram-sealed-" + std::to_string(::getpid()) + "-" +
             std::to_string(g_vfs_counter.fetch_add(1));
  sqlite3_vfs& vfs = impl.vfs;
  vfs.iVersion = 2;
  vfs.szOsFile = static_cast<int>(sizeof(SealedFile)) + real->szOsFile;
  vfs.mxPathname = real->mxPathname;
  vfs.zName = v->name_.c_str();
  vfs.pAppData = &impl;
  vfs.xOpen = SealedOpen;
  vfs.xDelete = SealedDelete;
  vfs.xAccess = SealedAccess;
  vfs.xFullPathname = SealedFullPathname;
  vfs.xDlOpen = SealedDlOpen;
  vfs.xDlError = SealedDlError;
  vfs.xDlSym = SealedDlSym;
  vfs.xDlClose = SealedDlClose;
  vfs.xRandomness = SealedRandomness;
  vfs.xSleep = SealedSleep;
  vfs.xCurrentTime = SealedCurrentTime;
  vfs.xGetLastError = SealedGetLastError;
  vfs.xCurrentTimeInt64 = SealedCurrentTimeInt64;
  if (const int rc = sqlite3_vfs_register(&vfs, /*makeDflt=*/0); rc != SQLITE_OK) {
    return Status::IoError(std::string("sqlite3_vfs_register: ") + sqlite3_errstr(rc));
  }
  return v;
}

SealedVfs::~SealedVfs() {
  if (impl_) sqlite3_vfs_unregister(&impl_->vfs);
}

void SealedVfs::SetNewFileHeader(std::vector<std::uint8_t> header) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->new_file_header = std::move(header);
}

std::string SealedVfs::last_error() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->last_error;
}

Result<sqlite3*> OpenSealedDatabase(const std::string& path, SealedVfs& vfs, bool create,
                                    bool read_only) {
  sqlite3* db = nullptr;
  int flags = read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
  if (create) flags |= SQLITE_OPEN_CREATE;
  flags |= SQLITE_OPEN_NOFOLLOW;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, vfs.name().c_str());
  auto fail = [&](const std::string& what) -> Status {
    std::string detail = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    const std::string why = vfs.last_error();
    if (!why.empty()) detail = why;
    if (db != nullptr) sqlite3_close_v2(db);
    db = nullptr;
    return Status::Corruption(path + ": " + what + ": " + detail);
  };
  if (rc != SQLITE_OK) return fail("cannot open the state");
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 5000);
  if (create) {
    rc = sqlite3_exec(db, "PRAGMA page_size=4096", nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return fail("setting the page size");
    int reserve = static_cast<int>(kSealedReserveBytes);
    rc = sqlite3_file_control(db, "main", SQLITE_FCNTL_RESERVE_BYTES, &reserve);
    if (rc != SQLITE_OK) return fail("reserving bytes for sealing");
    // Entering WAL mode rewrites the header page in a transaction of its
    // own; with no rollback journal (there is nothing to roll back in an
    // empty file) it needs no file in clear.
    rc = sqlite3_exec(db,
                      "PRAGMA temp_store=MEMORY; PRAGMA journal_mode=OFF; "
                      "PRAGMA journal_mode=WAL",
                      nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return fail("setting up the state");
  } else {
    rc = sqlite3_exec(db, "PRAGMA temp_store=MEMORY", nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return fail("setting up the state");
  }
  // Whole pages cut off the end pass every page's tag (checked first: the
  // schema may point past the end): compare the size the
  // database declares with the file, when no log holds pages of its own.
  struct stat file {}, wal {};
  const bool log_empty =
      ::stat((path + "-wal").c_str(), &wal) != 0 || wal.st_size == 0;
  // The page count in the database header (bytes 28-31, big-endian), read
  // through the VFS: any statement would first parse the schema, which may
  // itself point past the end.
  sqlite3_int64 pages = 0;
  sqlite3_file* main_file = nullptr;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &main_file) == SQLITE_OK &&
      main_file != nullptr && main_file->pMethods != nullptr) {
    unsigned char h[100] = {};
    if (main_file->pMethods->xRead(main_file, h, sizeof h, 0) == SQLITE_OK) {
      pages = (sqlite3_int64{h[28]} << 24) | (sqlite3_int64{h[29]} << 16) |
              (sqlite3_int64{h[30]} << 8) | sqlite3_int64{h[31]};
    }
  }
  if (log_empty && ::stat(path.c_str(), &file) == 0) {
    const sqlite3_int64 present =
        (static_cast<sqlite3_int64>(file.st_size) - static_cast<sqlite3_int64>(kSealedHeaderBytes)) /
        static_cast<sqlite3_int64>(kSealedPageBytes);
    if (pages > present) {
      sqlite3_close_v2(db);
      return Status::Corruption(path + ": the state declares " + std::to_string(pages) +
                                " pages but the file holds " + std::to_string(present) +
                                ": it was truncated");
    }
  }
  // The first read: the schema, through page 1.
  rc = sqlite3_exec(db, "SELECT count(*) FROM sqlite_schema", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return fail("reading the state");
  return db;
}

}  // namespace s3oram

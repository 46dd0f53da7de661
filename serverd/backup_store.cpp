// BackupStore: see backup_store.h for the files, the crash rule and idempotency.
#include "serverd/backup_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sodium.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>

#include "oramcore/base/durable_file.h"

namespace s3oram::serverd {
namespace {

using field::Elem;

constexpr std::uint32_t kFileMagic = 0x4b423353;  // "S3BK" little-endian
constexpr std::uint32_t kFileVersion = 2;
constexpr std::uint32_t kFileVersion1 = 1;  // no record digests; served unchecked
constexpr std::size_t kFileHeaderBytes = 32;
// Version 2 ends with one digest per record of kRecordElems elements (the
// last record may be shorter): BLAKE2b-128 of the record's bytes. A read
// checks every record it touches, so a disk that changed a stored share is
// reported (Damaged) instead of being served; restore then uses the other
// servers' shares. A checksum against faults, not against the server.
constexpr std::uint64_t kRecordElems = 4096;
constexpr std::size_t kRecordDigestBytes = 16;
using RecordDigest = std::array<std::uint8_t, kRecordDigestBytes>;

std::uint64_t RecordsOf(std::uint64_t elems) { return (elems + kRecordElems - 1) / kRecordElems; }
std::uint64_t FileBytes(std::uint32_t version, std::uint64_t elems) {
  const std::uint64_t data = kFileHeaderBytes + elems * sizeof(field::Elem);
  return version == kFileVersion1 ? data : data + RecordsOf(elems) * kRecordDigestBytes;
}
constexpr const char* kUploadName = "backup-upload.tmp";
constexpr const char* kPrefix = "backup-";
constexpr const char* kSuffix = ".bin";

static_assert(std::endian::native == std::endian::little,
              "backup files store elements as the in-memory little-endian u32 array");

std::string SysError(const std::string& what, const std::string& path, int err) {
  return what + " " + path + ": " + std::strerror(err);
}

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

std::array<std::uint8_t, kFileHeaderBytes> EncodeHeader(std::uint64_t generation,
                                                        std::uint64_t elems,
                                                        std::uint64_t key_epoch) {
  std::array<std::uint8_t, kFileHeaderBytes> h{};
  auto put = [&h](std::size_t at, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) h[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
  };
  put(0, kFileMagic, 4);
  put(4, kFileVersion, 4);
  put(8, generation, 8);
  put(16, elems, 8);
  put(24, key_epoch, 8);  // zero in files from before key epochs
  return h;
}

std::uint64_t GetLe(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}

Status WriteAll(int fd, const void* data, std::size_t n, std::uint64_t at,
                const std::string& path) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::size_t done = 0;
  while (done < n) {
    ssize_t w = ::pwrite(fd, p + done, n - done, static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Status::IoError(SysError("writing", path, errno));
    done += static_cast<std::size_t>(w);
  }
  return Status::Ok();
}

// Reads exactly n bytes at `at`; false if the file is shorter.
Result<bool> ReadAll(int fd, void* data, std::size_t n, std::uint64_t at,
                     const std::string& path) {
  auto* p = static_cast<std::uint8_t*>(data);
  std::size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::IoError(SysError("reading", path, errno));
    if (r == 0) return false;
    done += static_cast<std::size_t>(r);
  }
  return true;
}

// "backup-<decimal>.bin" -> generation (no sign, no leading zeros, non-zero).
std::optional<std::uint64_t> ParseName(const std::string& name) {
  const std::size_t pre = std::strlen(kPrefix), suf = std::strlen(kSuffix);
  if (name.size() <= pre + suf || name.compare(0, pre, kPrefix) != 0 ||
      name.compare(name.size() - suf, suf, kSuffix) != 0) {
    return std::nullopt;
  }
  const std::string digits = name.substr(pre, name.size() - pre - suf);
  if (digits.empty() || digits.size() > 20 || digits[0] == '0') return std::nullopt;
  std::uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (~std::uint64_t{0} - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

}  // namespace

struct BackupStore::Impl {
  std::string dir;
  bool sync = true;
  struct Stored {
    std::uint64_t elems = 0;
    std::uint32_t version = kFileVersion;
    std::uint64_t key_epoch = 0;
  };
  std::map<std::uint64_t, Stored> complete;  // by generation

  // The upload in progress (fd open on backup-upload.tmp), if any. Chunks
  // arrive in order, so each record's digest is computed as its elements
  // arrive and written at Finish.
  struct Upload {
    std::uint64_t generation = 0;
    std::uint64_t total = 0;
    std::uint64_t key_epoch = 0;
    std::uint64_t received = 0;
    Fd fd;
    std::vector<RecordDigest> digests;
    crypto_generichash_state record{};  // over the elements of the open record
  };
  std::optional<Upload> upload;

  std::string PathOf(std::uint64_t generation) const {
    return dir + "/" + kPrefix + std::to_string(generation) + kSuffix;
  }
  std::string UploadPath() const { return dir + "/" + kUploadName; }

  // Checks a generation file's header and size; its element count and
  // version, or why not.
  Result<Stored> Inspect(std::uint64_t generation) const {
    const std::string path = PathOf(generation);
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (fd.get() < 0) return Status::IoError(SysError("opening", path, errno));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return Status::IoError(SysError("stat of", path, errno));
    if (!S_ISREG(st.st_mode)) return Status::Corruption(path + " is not a regular file");
    std::array<std::uint8_t, kFileHeaderBytes> h{};
    S3ORAM_ASSIGN_OR_RETURN(bool full, ReadAll(fd.get(), h.data(), h.size(), 0, path));
    if (!full) return Status::Corruption(path + ": shorter than its header");
    const auto version = static_cast<std::uint32_t>(GetLe(&h[4], 4));
    if (GetLe(&h[0], 4) != kFileMagic || (version != kFileVersion && version != kFileVersion1)) {
      return Status::Corruption(path + ": not a backup share file (bad magic or version)");
    }
    if (GetLe(&h[8], 8) != generation) {
      return Status::Corruption(path + ": header names generation " +
                                std::to_string(GetLe(&h[8], 8)));
    }
    const std::uint64_t elems = GetLe(&h[16], 8);
    if (elems == 0 || elems > wire::kMaxBackupElems ||
        static_cast<std::uint64_t>(st.st_size) != FileBytes(version, elems)) {
      return Status::Corruption(path + ": size " + std::to_string(st.st_size) +
                                " does not match its header");
    }
    return Stored{elems, version, GetLe(&h[24], 8)};
  }

  Status Scan() {
    complete.clear();
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return Status::IoError(SysError("listing", dir, errno));
    std::vector<std::uint64_t> found;
    while (dirent* e = ::readdir(d)) {
      if (auto g = ParseName(e->d_name)) found.push_back(*g);
    }
    ::closedir(d);
    for (std::uint64_t g : found) {
      auto elems = Inspect(g);
      if (!elems.ok()) {
        // Left in place for an operator to look at, never served.
        spdlog::warn("ignoring backup generation {}: {}", g, elems.status().ToString());
        continue;
      }
      complete[g] = *elems;
      if (elems->version == kFileVersion1) {
        spdlog::info("backup generation {} predates record digests: served unchecked", g);
      }
    }
    return Status::Ok();
  }

  void DropUpload() {
    upload.reset();
    (void)::unlink(UploadPath().c_str());
  }

  // The highest key epoch of a complete generation (0 if none).
  std::uint64_t NewestKeyEpoch() const {
    std::uint64_t k = 0;
    for (const auto& [g, stored] : complete) k = std::max(k, stored.key_epoch);
    return k;
  }

  // After a new generation became durable, and at open (a crash may have
  // come between the two): unlink every generation of a key epoch below the
  // newest (made under a passphrase since changed), then all but the newest
  // two.
  Status Prune() {
    const std::uint64_t newest_key_epoch = NewestKeyEpoch();
    std::vector<std::uint64_t> doomed;  // ascending
    std::size_t kept = 0;
    // Newest first: the first kKeptGenerations of the newest key epoch stay.
    for (auto it = complete.rbegin(); it != complete.rend(); ++it) {
      if (it->second.key_epoch < newest_key_epoch) {
        spdlog::info("removing backup generation {}: made under key epoch {}, revoked by {}",
                     it->first, it->second.key_epoch, newest_key_epoch);
        doomed.insert(doomed.begin(), it->first);
      } else if (++kept > kKeptGenerations) {
        doomed.insert(doomed.begin(), it->first);
      }
    }
    for (std::uint64_t g : doomed) {
      const std::string path = PathOf(g);
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        return Status::IoError(SysError("removing old backup", path, errno));
      }
      complete.erase(g);
    }
    if (!doomed.empty() && sync) return SyncDirectory(dir);
    return Status::Ok();
  }

  Status Finish() {
    Upload& u = *upload;
    const std::string tmp = UploadPath();
    if (u.total % kRecordElems != 0) {  // the short last record
      u.digests.emplace_back();
      crypto_generichash_final(&u.record, u.digests.back().data(), kRecordDigestBytes);
    }
    S3ORAM_RETURN_IF_ERROR(WriteAll(u.fd.get(), u.digests.data(),
                                    u.digests.size() * kRecordDigestBytes,
                                    kFileHeaderBytes + u.total * sizeof(Elem), tmp));
    const auto h = EncodeHeader(u.generation, u.total, u.key_epoch);
    S3ORAM_RETURN_IF_ERROR(WriteAll(u.fd.get(), h.data(), h.size(), 0, tmp));
    if (sync && ::fdatasync(u.fd.get()) != 0) {
      return Status::IoError(SysError("fdatasync of", tmp, errno));
    }
    const std::string path = PathOf(u.generation);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      return Status::IoError(SysError("renaming " + tmp + " to", path, errno));
    }
    if (sync) S3ORAM_RETURN_IF_ERROR(SyncDirectory(dir));
    complete[u.generation] = Stored{u.total, kFileVersion, u.key_epoch};
    spdlog::info("backup generation {} stored ({} elements, key epoch {})", u.generation, u.total,
                 u.key_epoch);
    upload.reset();
    return Prune();
  }
};

Result<std::unique_ptr<BackupStore>> BackupStore::Open(const std::string& dir, bool sync) {
  std::unique_ptr<BackupStore> s(new BackupStore());
  s->impl_ = std::make_unique<Impl>();
  s->impl_->dir = dir;
  s->impl_->sync = sync;
  // An upload interrupted by a restart cannot be resumed (its client restarts
  // from offset 0), so it is garbage.
  if (::unlink(s->impl_->UploadPath().c_str()) != 0 && errno != ENOENT) {
    return Status::IoError(SysError("removing stale upload", s->impl_->UploadPath(), errno));
  }
  S3ORAM_RETURN_IF_ERROR(s->impl_->Scan());
  S3ORAM_RETURN_IF_ERROR(s->impl_->Prune());
  return s;
}

BackupStore::~BackupStore() = default;

Result<std::uint64_t> BackupStore::Put(std::uint64_t generation, std::uint64_t offset,
                                       std::uint64_t total, bool last,
                                       std::span<const Elem> shares, std::uint64_t key_epoch) {
  Impl& m = *impl_;
  const std::string what = "backup generation " + std::to_string(generation);
  if (generation == 0) return Status::InvalidArgument("backup generation 0 is not valid");
  if (total == 0 || total > wire::kMaxBackupElems) {
    return Status::InvalidArgument(what + ": size " + std::to_string(total) +
                                   " elements is not in [1, " +
                                   std::to_string(wire::kMaxBackupElems) + "]");
  }
  if (shares.empty() || shares.size() > wire::kMaxBackupChunkElems) {
    return Status::InvalidArgument(what + ": a chunk carries 1 to " +
                                   std::to_string(wire::kMaxBackupChunkElems) +
                                   " elements, not " + std::to_string(shares.size()));
  }
  if (offset > total || shares.size() > total - offset) {
    return Status::InvalidArgument(what + ": chunk [" + std::to_string(offset) + ", +" +
                                   std::to_string(shares.size()) + ") runs past its size " +
                                   std::to_string(total));
  }
  const std::uint64_t end = offset + shares.size();
  if (last != (end == total)) {
    return Status::InvalidArgument(what + ": the last chunk, and only it, must end at the size (" +
                                   "chunk ends at " + std::to_string(end) + " of " +
                                   std::to_string(total) + ", last=" + (last ? "1" : "0") + ")");
  }
  // A resent last chunk of a generation that is already complete.
  if (auto it = m.complete.find(generation); it != m.complete.end()) {
    if (last && it->second.elems == total && it->second.key_epoch == key_epoch) return total;
    return Status::InvalidArgument(what + " is already stored (" + std::to_string(it->second.elems) +
                                   " elements); a backup never replaces a generation");
  }
  if (!m.complete.empty() && generation < m.complete.rbegin()->first) {
    return Status::InvalidArgument(what + " is older than the newest stored generation " +
                                   std::to_string(m.complete.rbegin()->first));
  }
  if (const std::uint64_t newest = m.NewestKeyEpoch(); key_epoch < newest) {
    return Status::FailedPrecondition(
        what + " is made under key epoch " + std::to_string(key_epoch) +
        ", but the stored backups are of key epoch " + std::to_string(newest) +
        ": its passphrase was changed since (s3oram passwd), so it is refused");
  }

  if (offset == 0) {
    // (Re)start: whatever upload was in progress is abandoned.
    m.DropUpload();
    const std::string tmp = m.UploadPath();
    Fd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (fd.get() < 0) return Status::IoError(SysError("creating", tmp, errno));
    Impl::Upload u;
    u.generation = generation;
    u.total = total;
    u.key_epoch = key_epoch;
    u.fd = std::move(fd);
    u.digests.reserve(RecordsOf(total));
    crypto_generichash_init(&u.record, nullptr, 0, kRecordDigestBytes);
    m.upload = std::move(u);
  } else {
    if (!m.upload || m.upload->generation != generation || m.upload->total != total ||
        m.upload->key_epoch != key_epoch) {
      return Status::FailedPrecondition(what + ": chunk at offset " + std::to_string(offset) +
                                        " but no upload of this generation and size is in "
                                        "progress (start again at offset 0)");
    }
    if (end == m.upload->received && offset < end) {
      // Already stored (a resend): the bytes are identical or the client is
      // confused; either way nothing is rewritten.
      return m.upload->received;
    }
    if (offset != m.upload->received) {
      return Status::FailedPrecondition(what + ": chunk at offset " + std::to_string(offset) +
                                        " but " + std::to_string(m.upload->received) +
                                        " elements are stored (chunks come in order)");
    }
  }
  Impl::Upload& u = *m.upload;
  Status st = WriteAll(u.fd.get(), shares.data(), shares.size_bytes(),
                       kFileHeaderBytes + offset * sizeof(Elem), m.UploadPath());
  if (!st.ok()) {
    m.DropUpload();
    return st;
  }
  // Record digests over the elements just written, closing each record
  // whose last element arrived.
  for (std::uint64_t at = offset; at < end;) {
    const std::uint64_t record_end = (at / kRecordElems + 1) * kRecordElems;
    const std::uint64_t stop = std::min(end, record_end);
    crypto_generichash_update(&u.record,
                              reinterpret_cast<const unsigned char*>(shares.data() + (at - offset)),
                              (stop - at) * sizeof(Elem));
    if (stop == record_end) {
      u.digests.emplace_back();
      crypto_generichash_final(&u.record, u.digests.back().data(), kRecordDigestBytes);
      crypto_generichash_init(&u.record, nullptr, 0, kRecordDigestBytes);
    }
    at = stop;
  }
  u.received = end;
  if (last) {
    if (Status f = m.Finish(); !f.ok()) {
      if (m.upload) m.DropUpload();
      return f;
    }
  }
  return end;
}

std::vector<wire::BackupInfo> BackupStore::List() const {
  std::vector<wire::BackupInfo> out;
  for (const auto& [g, stored] : impl_->complete) {
    out.push_back({g, stored.elems, stored.key_epoch});
  }
  // Never more than the wire allows (Prune keeps two; a directory seeded by
  // hand with more is served newest first).
  if (out.size() > wire::kMaxBackupGenerations) {
    out.erase(out.begin(), out.end() - wire::kMaxBackupGenerations);
  }
  return out;
}

Result<std::vector<Elem>> BackupStore::Get(std::uint64_t generation, std::uint64_t offset,
                                           std::uint32_t count, std::uint64_t* total) const {
  const Impl& m = *impl_;
  const std::string what = "backup generation " + std::to_string(generation);
  auto it = m.complete.find(generation);
  if (it == m.complete.end()) return Status::NotFound(what + " is not stored on this server");
  const std::uint64_t size = it->second.elems;
  if (offset > size) {
    return Status::InvalidArgument(what + ": offset " + std::to_string(offset) +
                                   " is past its size " + std::to_string(size));
  }
  if (count == 0 || count > wire::kMaxBackupChunkElems) {
    return Status::InvalidArgument(what + ": a read returns 1 to " +
                                   std::to_string(wire::kMaxBackupChunkElems) + " elements, not " +
                                   std::to_string(count));
  }
  const std::uint64_t n = std::min<std::uint64_t>(count, size - offset);
  const std::string path = m.PathOf(generation);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) return Status::IoError(SysError("opening", path, errno));
  // Whole records around [offset, offset + n), each checked against its
  // digest before any of it is served (format 1: the range only, unchecked).
  const bool checked = it->second.version == kFileVersion;
  const std::uint64_t first = checked ? offset / kRecordElems * kRecordElems : offset;
  const std::uint64_t last =
      checked ? std::min(size, (offset + n + kRecordElems - 1) / kRecordElems * kRecordElems)
              : offset + n;
  std::vector<Elem> read(last - first);
  S3ORAM_ASSIGN_OR_RETURN(bool full, ReadAll(fd.get(), read.data(), read.size() * sizeof(Elem),
                                             kFileHeaderBytes + first * sizeof(Elem), path));
  if (!full) return Status::Corruption(path + " is shorter than its header says: damaged");
  if (checked) {
    const std::uint64_t r0 = first / kRecordElems, r1 = RecordsOf(last);
    std::vector<RecordDigest> stored(r1 - r0);
    S3ORAM_ASSIGN_OR_RETURN(
        bool have, ReadAll(fd.get(), stored.data(), stored.size() * kRecordDigestBytes,
                           kFileHeaderBytes + size * sizeof(Elem) + r0 * kRecordDigestBytes,
                           path));
    if (!have) return Status::Corruption(path + " is shorter than its header says: damaged");
    for (std::uint64_t r = r0; r < r1; ++r) {
      const std::uint64_t b = r * kRecordElems, e = std::min(size, b + kRecordElems);
      RecordDigest got{};
      crypto_generichash(got.data(), got.size(),
                         reinterpret_cast<const unsigned char*>(read.data() + (b - first)),
                         (e - b) * sizeof(Elem), nullptr, 0);
      if (sodium_memcmp(got.data(), stored[r - r0].data(), got.size()) != 0) {
        return Status::Damaged(what + " is damaged on this server's disk: elements [" +
                               std::to_string(b) + ", " + std::to_string(e) + ") of " + path +
                               " do not match their digest; restore uses the other servers' "
                               "shares, and the next backup replaces it");
      }
    }
  }
  std::vector<Elem> out(read.begin() + static_cast<std::ptrdiff_t>(offset - first),
                        read.begin() + static_cast<std::ptrdiff_t>(offset - first + n));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] >= field::kPrime) {
      return Status::Corruption(what + " is damaged on this server: element " +
                                std::to_string(offset + i) + " is not a field element");
    }
  }
  *total = size;
  return out;
}

Status BackupStore::RemoveAll() {
  Impl& m = *impl_;
  m.DropUpload();
  for (const auto& [g, n] : m.complete) {
    const std::string path = m.PathOf(g);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Status::IoError(SysError("removing backup", path, errno));
    }
  }
  m.complete.clear();
  if (m.sync) return SyncDirectory(m.dir);
  return Status::Ok();
}

}  // namespace s3oram::serverd

#include "oramcore/state/state_file.h"

#include <fcntl.h>
#include <sodium.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "oramcore/base/durable_file.h"
#include "oramcore/base/fault_point.h"
#include "oramcore/base/random.h"
#include "oramcore/crypto/subkeys.h"

namespace s3oram {
namespace {

static_assert(kSubkeyBytes == kSealedKeyBytes);

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Writes `bytes` at `offset` and waits for them to reach the disk.
Status WriteDurably(int fd, const std::vector<std::uint8_t>& bytes, off_t offset,
                    const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pwrite(fd, bytes.data() + done, bytes.size() - done, offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::IoError(Errno("writing the header of " + path));
    done += static_cast<std::size_t>(n);
  }
  if (::fdatasync(fd) != 0) return Status::IoError(Errno("syncing the header of " + path));
  return Status::Ok();
}

// Copy 1 first: until copy 0 is rewritten too, a reader still finds a valid
// copy of one generation or the other.
Status WriteBothCopies(const std::string& path, const StateHeader& h) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::IoError(Errno("opening " + path));
  const std::vector<std::uint8_t> copy = EncodeStateHeaderCopy(h);
  Status s = WriteDurably(fd, copy, static_cast<off_t>(kStateHeaderCopyBytes), path);
  if (s.ok()) s = WriteDurably(fd, copy, 0, path);
  ::close(fd);
  return s;
}

struct DbCloser {
  sqlite3* db = nullptr;
  ~DbCloser() {
    if (db != nullptr) sqlite3_close_v2(db);
  }
};

}  // namespace

Status WriteSealedCopy(UnlockedState& from, StateHeader header, const std::string& to) {
  header.format = kStateFormat;
  random::Bytes(header.binding);
  from.vfs().SetNewFileHeader(EncodeStateHeader(header));
  auto dest = OpenSealedDatabase(to, from.vfs(), /*create=*/true);
  from.vfs().SetNewFileHeader({});
  if (!dest.ok()) return dest.status().WithContext("making a copy of " + from.path());
  DbCloser out{*dest};
  auto src = from.OpenDatabase();
  if (!src.ok()) return src.status().WithContext("opening " + from.path() + " to copy it");
  DbCloser in{*src};
  sqlite3_backup* b = sqlite3_backup_init(out.db, "main", in.db, "main");
  if (b == nullptr) return Status::IoError("copying " + from.path() + ": " + sqlite3_errmsg(out.db));
  const int rc = sqlite3_backup_step(b, -1);
  const int finish = sqlite3_backup_finish(b);
  if (rc != SQLITE_DONE || finish != SQLITE_OK) {
    std::string why = from.vfs().last_error();
    if (why.empty()) why = sqlite3_errstr(rc != SQLITE_DONE ? rc : finish);
    return Status::IoError("copying " + from.path() + ": " + why);
  }
  sqlite3_close_v2(in.db);
  in.db = nullptr;
  // The last connection's close checkpoints the copy's log into it.
  const int closed = sqlite3_close_v2(out.db);
  out.db = nullptr;
  if (closed != SQLITE_OK) return Status::IoError("closing the copy of " + from.path());
  struct stat wal {};
  if (::stat((to + "-wal").c_str(), &wal) == 0 && wal.st_size > 0) {
    return Status::IoError("SQLite left a write-ahead log beside " + to);
  }
  return Status::Ok();
}

Status UnlockedState::Rebind(int* lock_fd) {
  const std::string tmp = path_ + ".converting";
  for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((tmp + suffix).c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError(Errno("creating " + tmp));
  ::close(fd);
  auto fail = [&](Status s) {
    for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((tmp + suffix).c_str());
    return s;
  };
  // The header as on disk now (a passwd in another process is in it).
  auto headers = ReadStateHeader(path_);
  if (!headers.ok()) return fail(headers.status());
  if (Status s = WriteSealedCopy(*this, headers->front(), tmp); !s.ok()) return fail(s);
  if (Status s = SyncFile(tmp); !s.ok()) return fail(s);
  auto fresh = RenameStateOver(tmp, path_, lock_fd, "state.convert.before_rename",
                               "state.convert.after_rename");
  if (!fresh.ok()) return fail(fresh.status());
  header_ = *fresh;
  return Status::Ok();
}

Result<StateHeader> RenameStateOver(const std::string& tmp, const std::string& path, int* lock_fd,
                                    const char* before_rename, const char* after_rename) {
  auto fresh = ReadStateHeader(tmp);
  if (!fresh.ok()) return fresh.status();
  int new_lock = -1;
  if (lock_fd != nullptr && *lock_fd >= 0) {
    new_lock = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    if (new_lock < 0 || ::flock(new_lock, LOCK_EX | LOCK_NB) != 0) {
      if (new_lock >= 0) ::close(new_lock);
      return Status::IoError(Errno("locking " + tmp));
    }
  }
  FaultPoint(before_rename);
  // The old file's log was folded into it when its last connection closed;
  // none may be paired with the new file.
  ::unlink((path + "-shm").c_str());
  struct stat wal {};
  if (::stat((path + "-wal").c_str(), &wal) == 0 && wal.st_size > 0) {
    if (new_lock >= 0) ::close(new_lock);
    return Status::FailedPrecondition(path + "-wal is not empty (is the state open in "
                                      "another process?); nothing replaced");
  }
  ::unlink((path + "-wal").c_str());
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    if (new_lock >= 0) ::close(new_lock);
    return Status::IoError(Errno("renaming " + tmp));
  }
  if (new_lock >= 0) {
    ::close(*lock_fd);
    *lock_fd = new_lock;
  }
  FaultPoint(after_rename);
  S3ORAM_RETURN_IF_ERROR(SyncDirectory(ParentDir(path)));
  return fresh->front();
}

Result<std::vector<StateHeader>> ReadStateHeader(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("no client state at " + path);
    return Status::IoError(Errno("opening " + path));
  }
  std::vector<std::uint8_t> region(kSealedHeaderBytes);
  std::size_t got = 0;
  while (got < region.size()) {
    const ssize_t n =
        ::pread(fd, region.data() + got, region.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const Status s = Status::IoError(Errno("reading " + path));
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  region.resize(got);
  return ParseStateHeader(region, path);
}

Result<std::unique_ptr<UnlockedState>> UnlockedState::Unlock(const std::string& path,
                                                             const Secret& passphrase) {
  S3ORAM_ASSIGN_OR_RETURN(std::vector<StateHeader> candidates, ReadStateHeader(path));
  Status last = Status::PermissionDenied("no header copy");
  for (const StateHeader& h : candidates) {
    auto master = UnwrapMasterKey(h.wrap, passphrase, h.fs_id);
    if (!master.ok()) {
      last = master.status();
      continue;
    }
    if (candidates.size() > 1) {
      // Finish (or, with the old passphrase, undo) the interrupted change.
      S3ORAM_RETURN_IF_ERROR(WriteBothCopies(path, h));
    }
    std::unique_ptr<UnlockedState> u(new UnlockedState());
    u->path_ = path;
    u->header_ = h;
    u->master_ = std::move(*master);
    S3ORAM_ASSIGN_OR_RETURN(u->vfs_, SealedVfs::Create(DeriveStateKey(u->master_)));
    return u;
  }
  return last;
}

Result<std::unique_ptr<UnlockedState>> UnlockedState::UnlockWithMaster(const std::string& path,
                                                                       Secret master) {
  if (master.size() != kMasterKeyBytes) return Status::InvalidArgument("master key size");
  S3ORAM_ASSIGN_OR_RETURN(std::vector<StateHeader> candidates, ReadStateHeader(path));
  std::unique_ptr<UnlockedState> u(new UnlockedState());
  u->path_ = path;
  u->header_ = candidates.front();
  u->master_ = std::move(master);
  S3ORAM_ASSIGN_OR_RETURN(u->vfs_, SealedVfs::Create(DeriveStateKey(u->master_)));
  return u;
}

Result<std::unique_ptr<UnlockedState>> UnlockedState::Create(const std::string& path,
                                                             const StateHeader& header,
                                                             Secret master) {
  if (master.size() != kMasterKeyBytes) return Status::InvalidArgument("master key size");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return Status::AlreadyExists("client state " + path + " already exists");
    return Status::IoError(Errno("creating " + path));
  }
  // open() applied the umask (which could leave 0400 or less): the state is
  // private and must stay writable by its owner, so 0600 whatever the umask.
  // SQLite gives the -wal and -shm files the database file's mode.
  const int chmod_rc = ::fchmod(fd, 0600);
  const int chmod_err = errno;
  ::close(fd);
  if (chmod_rc != 0) {
    ::unlink(path.c_str());
    return Status::IoError(path + ": fchmod: " + std::strerror(chmod_err));
  }
  std::unique_ptr<UnlockedState> u(new UnlockedState());
  u->path_ = path;
  u->header_ = header;
  // Every file has a binding of its own (a legacy file, made only by tests
  // of the conversion, has none).
  if (u->header_.format == kStateFormat) random::Bytes(u->header_.binding);
  u->master_ = std::move(master);
  auto vfs = SealedVfs::Create(DeriveStateKey(u->master_), EncodeStateHeader(u->header_));
  if (!vfs.ok()) {
    ::unlink(path.c_str());
    return vfs.status();
  }
  u->vfs_ = std::move(*vfs);
  auto db = OpenSealedDatabase(path, *u->vfs_, /*create=*/true);
  if (!db.ok()) {
    ::unlink(path.c_str());
    return db.status();
  }
  sqlite3_close_v2(*db);
  u->vfs_->SetNewFileHeader({});
  return u;
}

UnlockedState::~UnlockedState() = default;

Result<sqlite3*> UnlockedState::OpenDatabase(bool read_only) {
  return OpenSealedDatabase(path_, *vfs_, /*create=*/false, read_only);
}

Status UnlockedState::ReplaceKeyWrap(const KeyWrap& wrap) {
  StateHeader next = header_;
  next.wrap = wrap;
  next.generation = header_.generation + 1;
  S3ORAM_RETURN_IF_ERROR(WriteBothCopies(path_, next));
  header_ = next;
  return Status::Ok();
}

}  // namespace s3oram

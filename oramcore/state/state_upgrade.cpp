#include "oramcore/state/state_upgrade.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "oramcore/base/durable_file.h"
#include "oramcore/base/fault_point.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/state/sealed_vfs.h"
#include "oramcore/state/state_file.h"
#include "oramcore/state/state_header.h"

namespace s3oram {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

struct Db {
  sqlite3* db = nullptr;
  ~Db() {
    if (db != nullptr) sqlite3_close_v2(db);
  }
};

Status SqlFail(sqlite3* db, int rc, const std::string& what) {
  return Status::Corruption(what + ": " +
                            (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
}

// The old format's key wrap and fs id (client_state.cpp before encryption:
// meta rows kdf_ops, kdf_mem, key_salt, key_nonce, key_sealed, fs_id).
Status ReadOldHeader(sqlite3* db, StateHeader& h) {
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(db,
                              "SELECT key, value FROM meta WHERE key IN ('kdf_ops', "
                              "'kdf_mem', 'key_salt', 'key_nonce', 'key_sealed', 'fs_id')",
                              -1, &st, nullptr);
  if (rc != SQLITE_OK) return SqlFail(db, rc, "reading the key wrap (not an s3oram state?)");
  int found = 0;
  auto blob = [&](std::span<std::uint8_t> out) {
    if (sqlite3_column_type(st, 1) != SQLITE_BLOB ||
        static_cast<std::size_t>(sqlite3_column_bytes(st, 1)) != out.size()) {
      return false;
    }
    std::memcpy(out.data(), sqlite3_column_blob(st, 1), out.size());
    return true;
  };
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const auto* k = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    const std::string key = k != nullptr ? k : "";
    const auto u64 = std::bit_cast<std::uint64_t>(sqlite3_column_int64(st, 1));
    if (key == "kdf_ops") h.wrap.kdf.ops = u64, ++found;
    if (key == "kdf_mem") h.wrap.kdf.mem_bytes = u64, ++found;
    if (key == "key_salt" && blob(h.wrap.salt)) ++found;
    if (key == "key_nonce" && blob(h.wrap.nonce)) ++found;
    if (key == "key_sealed" && blob(h.wrap.sealed)) ++found;
    if (key == "fs_id" && blob(h.fs_id)) ++found;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return SqlFail(db, rc, "reading the key wrap");
  if (found != 6) return Status::Corruption("the state lacks its key wrap or filesystem id");
  return ValidateKdfParams(h.wrap.kdf);
}

bool NonEmpty(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && st.st_size > 0;
}

// A sealed state of format 1 rewritten in the current format (as a mount
// would do at open), under the same lock discipline.
Result<UpgradeReport> RebindLegacy(const std::string& path, const Secret& passphrase) {
  int lock_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (lock_fd < 0) return Status::IoError(Errno("opening " + path));
  struct LockCloser {
    int* fd;
    ~LockCloser() { ::close(*fd); }
  } lock_closer{&lock_fd};
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    return Status::FailedPrecondition(path +
                                      " is in use by another process (a mounted "
                                      "filesystem?): unmount it first");
  }
  S3ORAM_ASSIGN_OR_RETURN(auto unlocked, UnlockedState::Unlock(path, passphrase));
  const std::uint32_t from = unlocked->header().format;
  S3ORAM_RETURN_IF_ERROR(unlocked->Rebind(&lock_fd));
  UpgradeReport report;
  report.from_format = from;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && st.st_size > static_cast<off_t>(kSealedHeaderBytes)) {
    report.pages = static_cast<std::uint64_t>(st.st_size - static_cast<off_t>(kSealedHeaderBytes)) /
                   kSealedPageBytes;
  }
  return report;
}

}  // namespace

Result<UpgradeReport> UpgradeState(const std::string& path, const Secret& passphrase) {
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::NotFound("no client state at " + path);
    std::vector<std::uint8_t> prefix(16);
    in.read(reinterpret_cast<char*>(prefix.data()), 16);
    prefix.resize(static_cast<std::size_t>(in.gcount()));
    if (!LooksLikePlainSqlite(prefix)) {
      auto sealed = ReadStateHeader(path);
      if (!sealed.ok()) return sealed.status();
      if (sealed->front().format == kStateFormat) {
        return Status::FailedPrecondition(path + " is already encrypted in the current format (" +
                                          std::to_string(kStateFormat) + "); nothing to upgrade");
      }
      return RebindLegacy(path, passphrase);
    }
  }
  // One process at a time, as OramClient::Open: a mounted filesystem (of an
  // old version) must be unmounted first.
  const int lock_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (lock_fd < 0) return Status::IoError(Errno("opening " + path));
  struct LockCloser {
    int fd;
    ~LockCloser() { ::close(fd); }
  } lock_closer{lock_fd};
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    return Status::FailedPrecondition(path +
                                      " is in use by another process (a mounted "
                                      "filesystem?): unmount it first");
  }

  Db old;
  int rc = sqlite3_open_v2(path.c_str(), &old.db, SQLITE_OPEN_READWRITE, nullptr);
  if (rc != SQLITE_OK) return SqlFail(old.db, rc, "opening " + path);
  sqlite3_busy_timeout(old.db, 5000);
  StateHeader header;
  S3ORAM_RETURN_IF_ERROR(ReadOldHeader(old.db, header).WithContext(path));
  // The passphrase before anything is written: a wrong one changes nothing.
  S3ORAM_ASSIGN_OR_RETURN(Secret master, UnwrapMasterKey(header.wrap, passphrase, header.fs_id));

  // A copy in memory with the page size and reserved bytes sealing needs.
  Db mem;
  rc = sqlite3_open(":memory:", &mem.db);
  if (rc != SQLITE_OK) return SqlFail(mem.db, rc, "opening memory");
  {
    sqlite3_backup* b = sqlite3_backup_init(mem.db, "main", old.db, "main");
    if (b == nullptr) return SqlFail(mem.db, SQLITE_ERROR, "copying " + path);
    rc = sqlite3_backup_step(b, -1);
    sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE) return SqlFail(mem.db, rc, "copying " + path);
  }
  // The old file's log is checkpointed into it and removed at its close:
  // after the rename no old log may sit beside the new file.
  rc = sqlite3_wal_checkpoint_v2(old.db, nullptr, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqlFail(old.db, rc, "checkpointing " + path);
  sqlite3_close_v2(old.db);
  old.db = nullptr;
  int reserve = static_cast<int>(kSealedReserveBytes);
  rc = sqlite3_exec(mem.db, "PRAGMA page_size = 4096", nullptr, nullptr, nullptr);
  if (rc == SQLITE_OK) {
    rc = sqlite3_file_control(mem.db, "main", SQLITE_FCNTL_RESERVE_BYTES, &reserve);
  }
  if (rc == SQLITE_OK) {
    // The wrapped key moves to the clear header; the copy inside goes.
    rc = sqlite3_exec(mem.db,
                      "DELETE FROM meta WHERE key IN ('kdf_ops', 'kdf_mem', 'key_salt', "
                      "'key_nonce', 'key_sealed'); VACUUM",
                      nullptr, nullptr, nullptr);
  }
  if (rc != SQLITE_OK) return SqlFail(mem.db, rc, "re-paging the copy");

  const std::string tmp = path + ".upgrading";
  for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((tmp + suffix).c_str());
  UpgradeReport report;
  {
    S3ORAM_ASSIGN_OR_RETURN(auto sealed, UnlockedState::Create(tmp, header, std::move(master)));
    auto dest = sealed->OpenDatabase();
    if (!dest.ok()) return dest.status();
    Db out;
    out.db = *dest;
    sqlite3_backup* b = sqlite3_backup_init(out.db, "main", mem.db, "main");
    if (b == nullptr) return SqlFail(out.db, SQLITE_ERROR, "writing " + tmp);
    rc = sqlite3_backup_step(b, -1);
    sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE) {
      const std::string why = sealed->vfs().last_error();
      return Status::IoError("writing " + tmp + ": " + (why.empty() ? sqlite3_errstr(rc) : why));
    }
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(out.db, "PRAGMA page_count", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      report.pages = static_cast<std::uint64_t>(sqlite3_column_int64(st, 0));
    }
    sqlite3_finalize(st);
    // The close checkpoints the copy's log into it and removes it.
    if (sqlite3_close_v2(out.db) != SQLITE_OK) return Status::IoError("closing " + tmp);
    out.db = nullptr;
  }
  FaultPoint("upgrade.copied");
  if (NonEmpty(tmp + "-wal")) {
    return Status::IoError("SQLite left a write-ahead log beside " + tmp + "; nothing replaced");
  }
  if (NonEmpty(path + "-wal")) {
    return Status::IoError("the old state's write-ahead log " + path +
                           "-wal was not emptied; nothing replaced");
  }
  S3ORAM_RETURN_IF_ERROR(SyncFile(tmp));
  for (const char* suffix : {"-wal", "-shm"}) {
    ::unlink((path + suffix).c_str());
    ::unlink((tmp + suffix).c_str());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Status::IoError(Errno("renaming " + tmp));
  FaultPoint("upgrade.renamed");
  S3ORAM_RETURN_IF_ERROR(SyncDirectory(ParentDir(path)));
  return report;
}

}  // namespace s3oram

// MetadataStore (see metadata_store.h).
//
// Schema (fs schema version 3), in the client state file next to the
// ClientStateStore tables:
//   fs_meta(key TEXT PRIMARY KEY, value)  schema_version, capacity_blocks,
//                                         block_bytes, slots_per_block,
//                                         next_unused, sync_count
//   fs_inodes(ino INTEGER PRIMARY KEY AUTOINCREMENT, mode, uid, gid, nlink,
//             size, rdev, atime_ns, mtime_ns, ctime_ns)
//   fs_dirents(cookie INTEGER PRIMARY KEY AUTOINCREMENT, parent, name BLOB,
//              ino, UNIQUE(parent, name))
//   fs_symlinks(ino PRIMARY KEY, target BLOB)
//   fs_xattrs(ino, name BLOB, value BLOB, PRIMARY KEY(ino, name))
//   fs_blocks(ino, idx, block_id, slot, slots, valid,
//             next_id, next_slot, next_slots, PRIMARY KEY(ino, idx))
//   fs_shared(block_id PRIMARY KEY, used, nused, longest)
//   fs_free_blocks(block_id PRIMARY KEY)
// Block allocation (block_layout.h): ids below next_unused are either mapped
// whole by exactly one extent (slots 0, as a block's `at` or `next`),
// shared (a fs_shared row whose `used` slot mask is the union of the
// fragments in it, none overlapping; `nused` its popcount, `longest` its
// longest free run, for the allocator's index), or free (fs_free_blocks);
// ids from next_unused up to the capacity have never been used. A shared
// block whose last fragment is freed becomes free. `valid` is how many
// leading bytes of the ORAM's copy of an extent belong to the file: 0 for
// an extent allocated but never written back (the ORAM may still hold a
// previous owner's data there), at most the part of the block below the
// file size (Truncate lowers it, MarkWritten raises it). The daemon reads
// every byte at or past `valid` as zero. next_* (NULL when none) is a
// relocation target (BlockMapping::next). AUTOINCREMENT keeps inode numbers
// and cookies from being reused.
//
// Version 2 (whole blocks only, block_id UNIQUE) is migrated to 3 in place
// at Open, in one transaction: every old mapping becomes a whole extent.
//
// Internally, operation bodies report failure by throwing FsFail (an errno and
// a message); Run() catches it, rolls the transaction back and returns the
// errno. Nothing throws out of the public API.
#include "fused/metadata_store.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <exception>
#include <map>
#include <new>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "oramcore/base/fault_point.h"

namespace s3oram::fs {
namespace {

constexpr std::int64_t kFsSchemaVersion = 3;
constexpr int kBusyTimeoutMs = 5000;

struct FsFail {
  int err;
  std::string msg;
};

[[noreturn]] void Fail(int err, std::string msg = {}) { throw FsFail{err, std::move(msg)}; }

std::int64_t ToSql(std::uint64_t v) { return std::bit_cast<std::int64_t>(v); }
std::uint64_t FromSql(std::int64_t v) { return std::bit_cast<std::uint64_t>(v); }

std::int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool IsDir(std::uint32_t mode) { return (mode & S_IFMT) == S_IFDIR; }

void CheckName(std::string_view name) {
  if (name.size() > kMaxNameBytes) Fail(ENAMETOOLONG, "name too long");
  if (name.empty() || name == "." || name == ".." ||
      name.find('/') != std::string_view::npos || name.find('\0') != std::string_view::npos) {
    Fail(EINVAL, "invalid name");
  }
}

constexpr const char* kSchemaSql = R"sql(
CREATE TABLE IF NOT EXISTS fs_meta(key TEXT PRIMARY KEY NOT NULL, value NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fs_inodes(
  ino INTEGER PRIMARY KEY AUTOINCREMENT,
  mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL,
  nlink INTEGER NOT NULL CHECK (nlink >= 0), size INTEGER NOT NULL, rdev INTEGER NOT NULL,
  atime_ns INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS fs_inodes_nlink ON fs_inodes(nlink);
CREATE TABLE IF NOT EXISTS fs_dirents(
  cookie INTEGER PRIMARY KEY AUTOINCREMENT,
  parent INTEGER NOT NULL, name BLOB NOT NULL, ino INTEGER NOT NULL,
  UNIQUE(parent, name));
CREATE INDEX IF NOT EXISTS fs_dirents_parent_cookie ON fs_dirents(parent, cookie);
CREATE INDEX IF NOT EXISTS fs_dirents_ino ON fs_dirents(ino);
CREATE TABLE IF NOT EXISTS fs_symlinks(ino INTEGER PRIMARY KEY, target BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS fs_xattrs(
  ino INTEGER NOT NULL, name BLOB NOT NULL, value BLOB NOT NULL,
  PRIMARY KEY(ino, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fs_blocks(
  ino INTEGER NOT NULL, idx INTEGER NOT NULL, block_id INTEGER NOT NULL,
  slot INTEGER NOT NULL DEFAULT 0, slots INTEGER NOT NULL DEFAULT 0,
  valid INTEGER NOT NULL DEFAULT 0,
  next_id INTEGER, next_slot INTEGER, next_slots INTEGER,
  PRIMARY KEY(ino, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fs_free_blocks(block_id INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS fs_shared(
  block_id INTEGER PRIMARY KEY, used INTEGER NOT NULL, nused INTEGER NOT NULL,
  longest INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS fs_shared_longest ON fs_shared(longest, block_id);
)sql";

// Version 2 to 3: the old fs_blocks (block_id UNIQUE, whole blocks) copied
// into the new shape; fs_shared starts empty.
constexpr const char* kMigrate2To3Sql = R"sql(
ALTER TABLE fs_blocks RENAME TO fs_blocks_v2;
CREATE TABLE fs_blocks(
  ino INTEGER NOT NULL, idx INTEGER NOT NULL, block_id INTEGER NOT NULL,
  slot INTEGER NOT NULL DEFAULT 0, slots INTEGER NOT NULL DEFAULT 0,
  valid INTEGER NOT NULL DEFAULT 0,
  next_id INTEGER, next_slot INTEGER, next_slots INTEGER,
  PRIMARY KEY(ino, idx)) WITHOUT ROWID;
INSERT INTO fs_blocks(ino, idx, block_id, valid) SELECT ino, idx, block_id, valid FROM fs_blocks_v2;
DROP TABLE fs_blocks_v2;
CREATE TABLE fs_shared(
  block_id INTEGER PRIMARY KEY, used INTEGER NOT NULL, nused INTEGER NOT NULL,
  longest INTEGER NOT NULL);
CREATE INDEX fs_shared_longest ON fs_shared(longest, block_id);
UPDATE fs_meta SET value = 3 WHERE key = 'schema_version';
)sql";

// A cached prepared statement in use: binds, steps, and resets on destruction.
class Q {
 public:
  Q(sqlite3* db, sqlite3_stmt* st) : db_(db), st_(st) {}
  ~Q() {
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }
  Q(const Q&) = delete;
  Q& operator=(const Q&) = delete;

  Q& I(std::int64_t v) {
    sqlite3_bind_int64(st_, ++n_, v);
    return *this;
  }
  Q& U(std::uint64_t v) { return I(ToSql(v)); }
  Q& B(std::string_view s) {
    if (s.empty()) {
      sqlite3_bind_zeroblob(st_, ++n_, 0);
    } else {
      sqlite3_bind_blob64(st_, ++n_, s.data(), s.size(), SQLITE_TRANSIENT);
    }
    return *this;
  }
  Q& Nul() {
    sqlite3_bind_null(st_, ++n_);
    return *this;
  }
  Q& T(const char* s) {
    sqlite3_bind_text(st_, ++n_, s, -1, SQLITE_TRANSIENT);
    return *this;
  }
  // Steps: true with a row, false when done; EIO on an SQLite error.
  bool Next() {
    int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    Fail(EIO, std::string("sqlite: ") + sqlite3_errmsg(db_) +
                  (sqlite3_extended_errcode(db_) == SQLITE_IOERR_DATA
                       ? " (a page of the sealed state failed authentication: it was modified "
                         "or damaged)"
                       : ""));
  }
  void Run() {
    while (Next()) {
    }
  }
  std::int64_t Col(int c) const { return sqlite3_column_int64(st_, c); }
  bool Null(int c) const { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
  std::uint64_t UCol(int c) const { return FromSql(Col(c)); }
  std::string Str(int c) const {
    const void* p = sqlite3_column_blob(st_, c);
    int n = sqlite3_column_bytes(st_, c);
    return p ? std::string(static_cast<const char*>(p), static_cast<std::size_t>(n)) : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_;
  int n_ = 0;
};

Status SqlErr(sqlite3* db, int rc, const std::string& what) {
  std::string msg = what + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  if (rc == SQLITE_IOERR_DATA) {  // the sealed VFS refused a page (sealed_vfs.h)
    return Status::Corruption(msg + ": a page of the sealed state failed authentication");
  }
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_ERROR:
      return Status::Corruption(msg);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status::Unavailable(msg);
    default:
      return Status::IoError(msg);
  }
}

Status Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string msg = err ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  return SqlErr(nullptr, rc, std::string("executing \"") + sql + "\": " + msg);
}

}  // namespace

// Statement cache plus the row-level helpers operation bodies are made of.
// Every method runs inside a transaction opened by Run().
class MetadataStore::Impl {
 public:
  Impl(sqlite3* db, std::uint64_t capacity, std::uint32_t block_bytes)
      : db_(db), capacity_(capacity), block_bytes_(block_bytes), layout_(block_bytes) {}
  ~Impl() {
    for (auto& [sql, st] : cache_) sqlite3_finalize(st);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  Q S(const char* sql) {
    auto it = cache_.find(sql);
    if (it == cache_.end()) {
      sqlite3_stmt* st = nullptr;
      int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, nullptr);
      if (rc != SQLITE_OK) Fail(EIO, std::string("sqlite prepare: ") + sqlite3_errmsg(db_));
      it = cache_.emplace(sql, st).first;
    }
    return Q(db_, it->second);
  }

  void ExecOrFail(const char* sql) {
    Status s = Exec(db_, sql);
    if (!s.ok()) Fail(EIO, s.message());
  }

  std::optional<Attr> FindInode(Ino ino) {
    Q q = S("SELECT mode, uid, gid, nlink, size, rdev, atime_ns, mtime_ns, ctime_ns "
            "FROM fs_inodes WHERE ino = ?");
    q.U(ino);
    if (!q.Next()) return std::nullopt;
    Attr a;
    a.ino = ino;
    a.mode = static_cast<std::uint32_t>(q.Col(0));
    a.uid = static_cast<std::uint32_t>(q.Col(1));
    a.gid = static_cast<std::uint32_t>(q.Col(2));
    a.nlink = static_cast<std::uint32_t>(q.Col(3));
    a.size = q.UCol(4);
    a.rdev = q.UCol(5);
    a.atime_ns = q.Col(6);
    a.mtime_ns = q.Col(7);
    a.ctime_ns = q.Col(8);
    return a;
  }

  Attr Inode(Ino ino) {
    auto a = FindInode(ino);
    if (!a) Fail(ENOENT, "no such inode");
    return *a;
  }

  // Inode attributes plus the bytes its extents hold (for st_blocks).
  Attr FullAttr(Ino ino) {
    Attr a = Inode(ino);
    Q q = S("SELECT coalesce(sum(CASE WHEN slots = 0 THEN ? ELSE slots * ? END), 0) "
            "FROM fs_blocks WHERE ino = ?");
    q.I(layout_.block_bytes()).I(layout_.slot_bytes()).U(ino);
    if (q.Next()) a.mapped_bytes = q.UCol(0);
    return a;
  }

  Attr Dir(Ino ino) {
    Attr a = Inode(ino);
    if (!IsDir(a.mode)) Fail(ENOTDIR, "not a directory");
    if (a.nlink == 0) Fail(ENOENT, "directory was removed");
    return a;
  }

  std::optional<Ino> Entry(Ino parent, std::string_view name) {
    Q q = S("SELECT ino FROM fs_dirents WHERE parent = ? AND name = ?");
    q.U(parent).B(name);
    if (!q.Next()) return std::nullopt;
    return q.UCol(0);
  }

  std::optional<Ino> ParentOf(Ino dir) {
    Q q = S("SELECT parent FROM fs_dirents WHERE ino = ? LIMIT 1");
    q.U(dir);
    if (!q.Next()) return std::nullopt;
    return q.UCol(0);
  }

  bool DirEmpty(Ino dir) {
    Q q = S("SELECT 1 FROM fs_dirents WHERE parent = ? LIMIT 1");
    q.U(dir);
    return !q.Next();
  }

  void AddNlink(Ino ino, std::int64_t delta) {
    S("UPDATE fs_inodes SET nlink = nlink + ? WHERE ino = ?").I(delta).U(ino).Run();
  }
  void TouchCtime(Ino ino, std::int64_t now) {
    S("UPDATE fs_inodes SET ctime_ns = ? WHERE ino = ?").I(now).U(ino).Run();
  }
  void TouchDir(Ino dir, std::int64_t now) {
    S("UPDATE fs_inodes SET mtime_ns = ?, ctime_ns = ? WHERE ino = ?").I(now).I(now).U(dir).Run();
  }

  void InsertEntry(Ino parent, std::string_view name, Ino ino) {
    S("INSERT INTO fs_dirents(parent, name, ino) VALUES (?, ?, ?)").U(parent).B(name).U(ino).Run();
  }
  void DeleteEntry(Ino parent, std::string_view name) {
    S("DELETE FROM fs_dirents WHERE parent = ? AND name = ?").U(parent).B(name).Run();
  }

  Ino NewInode(std::uint32_t mode, std::uint32_t uid, std::uint32_t gid, std::uint32_t nlink,
               std::uint64_t size, std::uint64_t rdev, std::int64_t now) {
    S("INSERT INTO fs_inodes(mode, uid, gid, nlink, size, rdev, atime_ns, mtime_ns, ctime_ns) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
        .I(mode).I(uid).I(gid).I(nlink).U(size).U(rdev).I(now).I(now).I(now)
        .Run();
    return FromSql(sqlite3_last_insert_rowid(db_));
  }

  // Parent checks shared by every operation that adds an entry.
  void PrepareNewEntry(Ino parent, std::string_view name) {
    CheckName(name);
    Dir(parent);
    if (Entry(parent, name)) Fail(EEXIST, "entry exists");
  }

  std::uint64_t MetaGet(const char* key) {
    Q q = S("SELECT value FROM fs_meta WHERE key = ?");
    q.T(key);
    if (!q.Next()) Fail(EIO, std::string("fs_meta lacks ") + key);
    return q.UCol(0);
  }
  void MetaSet(const char* key, std::uint64_t v) {
    S("INSERT OR REPLACE INTO fs_meta(key, value) VALUES (?, ?)").T(key).U(v).Run();
  }

  BlockId AllocateBlock() {
    {
      Q q = S("SELECT block_id FROM fs_free_blocks ORDER BY block_id LIMIT 1");
      if (q.Next()) {
        BlockId id = q.UCol(0);
        S("DELETE FROM fs_free_blocks WHERE block_id = ?").U(id).Run();
        return id;
      }
    }
    std::uint64_t next = MetaGet("next_unused");
    if (next >= capacity_) Fail(ENOSPC, "no free ORAM block");
    MetaSet("next_unused", next + 1);
    return next;
  }

  // A fs_blocks row selected as (idx, block_id, valid, slot, slots, next_id,
  // next_slot, next_slots).
  static BlockMapping RowMapping(const Q& q) {
    BlockMapping m;
    m.idx = q.UCol(0);
    m.id = q.UCol(1);
    m.valid = static_cast<std::uint32_t>(q.Col(2));
    m.slot = static_cast<std::uint32_t>(q.Col(3));
    m.slots = static_cast<std::uint32_t>(q.Col(4));
    if (!q.Null(5)) {
      m.next = Extent{q.UCol(5), static_cast<std::uint32_t>(q.Col(6)),
                      static_cast<std::uint32_t>(q.Col(7))};
    }
    return m;
  }

  std::optional<BlockMapping> FindMapping(Ino ino, std::uint64_t idx) {
    Q q = S("SELECT idx, block_id, valid, slot, slots, next_id, next_slot, next_slots "
            "FROM fs_blocks WHERE ino = ? AND idx = ?");
    q.U(ino).U(idx);
    if (!q.Next()) return std::nullopt;
    return RowMapping(q);
  }

  // An extent of `slots` slots (0: a whole block). Fragments go to the
  // lowest shared block with room (first fit), so consecutive small files
  // share blocks and their write-backs coalesce; a new shared block is taken
  // from the free blocks only when none has room.
  Extent AllocateExtent(std::uint32_t slots) {
    if (slots == 0) return Extent{AllocateBlock(), 0, 0};
    std::optional<std::pair<BlockId, std::uint64_t>> found;
    {
      Q q = S("SELECT block_id, used FROM fs_shared WHERE longest >= ? ORDER BY block_id LIMIT 1");
      q.I(slots);
      if (q.Next()) found = {q.UCol(0), q.UCol(1)};
    }
    BlockId id = 0;
    std::uint64_t used = 0;
    if (found) {
      std::tie(id, used) = *found;
    } else {
      id = AllocateBlock();
      S("INSERT INTO fs_shared(block_id, used, nused, longest) VALUES (?, 0, 0, ?)")
          .U(id).I(layout_.slots_per_block()).Run();
    }
    const int slot = layout_.FirstFit(used, slots);
    if (slot < 0) Fail(EIO, "fs_shared longest free run is wrong for block " + std::to_string(id));
    SetShared(id, used | BlockLayout::Mask(static_cast<std::uint32_t>(slot), slots));
    return Extent{id, static_cast<std::uint32_t>(slot), slots};
  }

  void SetShared(BlockId id, std::uint64_t used) {
    S("UPDATE fs_shared SET used = ?, nused = ?, longest = ? WHERE block_id = ?")
        .U(used).I(std::popcount(used)).I(layout_.LongestFree(used)).U(id).Run();
  }

  // Returns an extent's space: a whole block to the free list, a fragment's
  // slots to its shared block (which is freed with its last fragment). Ids
  // of blocks that became free go to *freed.
  void FreeExtent(const Extent& e, std::vector<BlockId>* freed) {
    if (!e.whole()) {
      std::uint64_t used = 0;
      {
        Q q = S("SELECT used FROM fs_shared WHERE block_id = ?");
        q.U(e.id);
        if (!q.Next()) Fail(EIO, "fragment in block " + std::to_string(e.id) + " is not shared");
        used = q.UCol(0);
      }
      const std::uint64_t mask = BlockLayout::Mask(e.slot, e.slots);
      if ((used & mask) != mask) {
        Fail(EIO, "fragment slots of block " + std::to_string(e.id) + " are not marked used");
      }
      used &= ~mask;
      if (used != 0) {
        SetShared(e.id, used);
        return;
      }
      S("DELETE FROM fs_shared WHERE block_id = ?").U(e.id).Run();
    }
    S("INSERT INTO fs_free_blocks(block_id) VALUES (?)").U(e.id).Run();
    if (freed) freed->push_back(e.id);
  }

  void SetNext(Ino ino, std::uint64_t idx, const std::optional<Extent>& e) {
    Q q = S("UPDATE fs_blocks SET next_id = ?, next_slot = ?, next_slots = ? "
            "WHERE ino = ? AND idx = ?");
    if (e) {
      q.U(e->id).I(e->slot).I(e->slots);
    } else {
      q.Nul().Nul().Nul();
    }
    q.U(ino).U(idx).Run();
  }

  // Unmaps blocks idx >= first_idx of `ino`, returning their extents' space.
  void FreeBlocksFrom(Ino ino, std::uint64_t first_idx, std::vector<BlockId>* freed) {
    std::vector<BlockMapping> maps;
    {
      Q q = S("SELECT idx, block_id, valid, slot, slots, next_id, next_slot, next_slots "
              "FROM fs_blocks WHERE ino = ? AND idx >= ? ORDER BY idx");
      q.U(ino).U(first_idx);
      while (q.Next()) maps.push_back(RowMapping(q));
    }
    if (maps.empty()) return;
    S("DELETE FROM fs_blocks WHERE ino = ? AND idx >= ?").U(ino).U(first_idx).Run();
    for (const BlockMapping& m : maps) {
      FreeExtent(m.at(), freed);
      if (m.next) FreeExtent(*m.next, freed);
    }
  }

  // Deletes an unlinked inode and everything hanging off it.
  void DestroyInode(Ino ino, std::vector<BlockId>* freed) {
    FreeBlocksFrom(ino, 0, freed);
    S("DELETE FROM fs_xattrs WHERE ino = ?").U(ino).Run();
    S("DELETE FROM fs_symlinks WHERE ino = ?").U(ino).Run();
    S("DELETE FROM fs_inodes WHERE ino = ?").U(ino).Run();
  }

  // True if `dir` is `ancestor` or lies below it.
  bool InSubtree(Ino dir, Ino ancestor) {
    Ino cur = dir;
    for (int steps = 0; steps < 1 << 20; ++steps) {
      if (cur == ancestor) return true;
      if (cur == kRootIno) return false;
      auto p = ParentOf(cur);
      if (!p) return false;
      cur = *p;
    }
    Fail(EIO, "directory tree has a cycle");
  }

  // Block indices are stored as SQLite integers; indices past INT64_MAX never exist.
  static std::int64_t ClampIdx(std::uint64_t idx) {
    return static_cast<std::int64_t>(std::min<std::uint64_t>(idx, INT64_MAX));
  }

  std::uint64_t BlocksFor(std::uint64_t size) const {
    return size / block_bytes_ + (size % block_bytes_ != 0 ? 1 : 0);
  }

  sqlite3* db_;
  std::uint64_t capacity_;
  std::uint32_t block_bytes_;
  BlockLayout layout_;
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

// ---------------------------------------------------------------------------

MetadataStore::MetadataStore(sqlite3* db, std::uint64_t capacity, std::uint32_t block_bytes)
    : db_(db),
      capacity_(capacity),
      block_bytes_(block_bytes),
      layout_(block_bytes),
      impl_(std::make_unique<Impl>(db, capacity, block_bytes)) {}

MetadataStore::~MetadataStore() {
  impl_.reset();  // finalize statements before closing
  sqlite3_close_v2(db_);
}

std::string MetadataStore::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

template <typename F>
int MetadataStore::Run(bool write, F&& body) {
  std::lock_guard<std::mutex> lock(mu_);
  last_error_.clear();  // never report an earlier operation's failure
  Status s = Exec(db_, write ? "BEGIN IMMEDIATE" : "BEGIN");
  if (!s.ok()) {
    last_error_ = s.message();
    return EIO;
  }
  try {
    body(*impl_);
    if (write) FaultPoint("metadata.commit.before");
    s = Exec(db_, "COMMIT");
    if (write && s.ok()) FaultPoint("metadata.commit.after");
    if (!s.ok()) {
      (void)Exec(db_, "ROLLBACK");
      last_error_ = s.message();
      return EIO;
    }
    return 0;
  } catch (const FsFail& f) {
    (void)Exec(db_, "ROLLBACK");
    if (f.err == EIO) last_error_ = f.msg;
    return f.err;
  } catch (const std::bad_alloc&) {
    (void)Exec(db_, "ROLLBACK");
    last_error_ = "out of memory";
    return ENOMEM;
  } catch (const std::exception& e) {
    (void)Exec(db_, "ROLLBACK");
    last_error_ = e.what();
    return EIO;
  }
}

Result<std::unique_ptr<MetadataStore>> MetadataStore::Open(std::shared_ptr<UnlockedState> state,
                                                           std::uint64_t capacity_blocks,
                                                           std::uint32_t block_bytes) {
  if (block_bytes == 0) return Status::InvalidArgument("block_bytes is 0");
  const std::string state_path = state->path();
  S3ORAM_ASSIGN_OR_RETURN(sqlite3 * db, state->OpenDatabase());
  auto fail = [&](Status s) -> Status {
    sqlite3_close_v2(db);
    return s.WithContext(state_path);
  };
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  sqlite3_extended_result_codes(db, 1);
  if (Status s = Exec(db, "PRAGMA journal_mode = WAL"); !s.ok()) return fail(s);
  if (Status s = Exec(db, "PRAGMA synchronous = NORMAL"); !s.ok()) return fail(s);
  if (Status s = Exec(db, "BEGIN IMMEDIATE"); !s.ok()) return fail(s);
  auto rollback_fail = [&](Status s) -> Status {
    (void)Exec(db, "ROLLBACK");
    return fail(std::move(s));
  };

  // Reads a fs_meta integer; nullopt if the table or the key is absent.
  auto read_meta = [&](const char* key, std::optional<std::int64_t>* out) -> Status {
    sqlite3_stmt* q = nullptr;
    int prc = sqlite3_prepare_v2(db, "SELECT value FROM fs_meta WHERE key = ?", -1, &q, nullptr);
    if (prc != SQLITE_OK) {
      sqlite3_finalize(q);
      *out = std::nullopt;
      return Status::Ok();  // no fs_meta table yet
    }
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    int src = sqlite3_step(q);
    if (src == SQLITE_ROW) {
      if (sqlite3_column_type(q, 0) != SQLITE_INTEGER) {
        sqlite3_finalize(q);
        return Status::Corruption(std::string("fs_meta ") + key + " is not an integer");
      }
      *out = sqlite3_column_int64(q, 0);
    } else if (src == SQLITE_DONE) {
      *out = std::nullopt;
    } else {
      Status s = SqlErr(db, src, std::string("reading fs_meta ") + key);
      sqlite3_finalize(q);
      return s;
    }
    sqlite3_finalize(q);
    return Status::Ok();
  };

  std::optional<std::int64_t> version;
  if (Status s = read_meta("schema_version", &version); !s.ok()) return rollback_fail(s);
  if (version && *version == 2) {
    // Whole blocks only: every mapping becomes a whole extent.
    if (Status s = Exec(db, kMigrate2To3Sql); !s.ok()) return rollback_fail(s);
    const std::string spb = "INSERT OR REPLACE INTO fs_meta(key, value) VALUES "
                            "('slots_per_block', " +
                            std::to_string(BlockLayout::SlotsPerBlock(block_bytes)) + ")";
    if (Status s = Exec(db, spb.c_str()); !s.ok()) return rollback_fail(s);
    version = kFsSchemaVersion;
  }
  if (version && *version != kFsSchemaVersion) {
    return rollback_fail(Status::Corruption("unknown filesystem schema version " +
                                            std::to_string(*version) + " (expected " +
                                            std::to_string(kFsSchemaVersion) + ")"));
  }
  if (!version) {
    // Either a fresh state, or fs_meta exists without a version (damaged).
    sqlite3_stmt* q = nullptr;
    bool has_table = false;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE name = 'fs_meta'", -1, &q,
                           nullptr) == SQLITE_OK) {
      has_table = sqlite3_step(q) == SQLITE_ROW;
    }
    sqlite3_finalize(q);
    if (has_table) {
      return rollback_fail(Status::Corruption("fs_meta has no schema_version"));
    }
    if (Status s = Exec(db, kSchemaSql); !s.ok()) return rollback_fail(s);
    const std::int64_t now = NowNs();
    std::string init =
        "INSERT INTO fs_meta(key, value) VALUES ('schema_version', " +
        std::to_string(kFsSchemaVersion) + "), ('capacity_blocks', " +
        std::to_string(ToSql(capacity_blocks)) + "), ('block_bytes', " +
        std::to_string(block_bytes) + "), ('slots_per_block', " +
        std::to_string(BlockLayout::SlotsPerBlock(block_bytes)) +
        "), ('next_unused', 0), ('sync_count', 0);"
        "INSERT INTO fs_inodes(ino, mode, uid, gid, nlink, size, rdev, atime_ns, mtime_ns, "
        "ctime_ns) VALUES (1, " +
        std::to_string(S_IFDIR | 0755) + ", " + std::to_string(::getuid()) + ", " +
        std::to_string(::getgid()) + ", 2, 0, 0, " + std::to_string(now) + ", " +
        std::to_string(now) + ", " + std::to_string(now) + ");";
    if (Status s = Exec(db, init.c_str()); !s.ok()) return rollback_fail(s);
  } else {
    std::optional<std::int64_t> cap, bb, next, spb;
    if (Status s = read_meta("capacity_blocks", &cap); !s.ok()) return rollback_fail(s);
    if (Status s = read_meta("block_bytes", &bb); !s.ok()) return rollback_fail(s);
    if (Status s = read_meta("next_unused", &next); !s.ok()) return rollback_fail(s);
    if (Status s = read_meta("slots_per_block", &spb); !s.ok()) return rollback_fail(s);
    if (!cap || !bb || !next || !spb) {
      return rollback_fail(Status::Corruption("fs_meta is incomplete"));
    }
    if (FromSql(*cap) != capacity_blocks || *bb != static_cast<std::int64_t>(block_bytes)) {
      return rollback_fail(Status::FailedPrecondition(
          "filesystem was made for " + std::to_string(FromSql(*cap)) + " blocks of " +
          std::to_string(*bb) + " bytes, not " + std::to_string(capacity_blocks) + " of " +
          std::to_string(block_bytes)));
    }
    if (*spb != static_cast<std::int64_t>(BlockLayout::SlotsPerBlock(block_bytes))) {
      return rollback_fail(Status::Corruption("fs_meta slots_per_block is " +
                                              std::to_string(*spb) + ", not " +
                                              std::to_string(BlockLayout::SlotsPerBlock(block_bytes))));
    }
    if (FromSql(*next) > capacity_blocks) {
      return rollback_fail(Status::Corruption("fs_meta next_unused beyond capacity"));
    }
  }
  if (Status s = Exec(db, "COMMIT"); !s.ok()) return rollback_fail(s);
  std::unique_ptr<MetadataStore> store(new MetadataStore(db, capacity_blocks, block_bytes));
  store->state_ = std::move(state);
  return store;
}

// --- names and inodes -------------------------------------------------------

int MetadataStore::Lookup(Ino parent, std::string_view name, Attr* out) {
  return Run(false, [&](Impl& m) {
    if (name.size() > kMaxNameBytes) Fail(ENAMETOOLONG);
    m.Dir(parent);
    Ino ino = 0;
    if (name == ".") {
      ino = parent;
    } else if (name == "..") {
      ino = parent == kRootIno ? kRootIno : m.ParentOf(parent).value_or(kRootIno);
    } else {
      if (name.empty() || name.find('/') != std::string_view::npos) Fail(EINVAL);
      auto e = m.Entry(parent, name);
      if (!e) Fail(ENOENT);
      ino = *e;
    }
    Attr a = m.FullAttr(ino);
    if (out) *out = a;
  });
}

int MetadataStore::GetAttr(Ino ino, Attr* out) {
  return Run(false, [&](Impl& m) {
    Attr a = m.FullAttr(ino);
    if (out) *out = a;
  });
}

int MetadataStore::Create(Ino parent, std::string_view name, std::uint32_t mode, std::uint32_t uid,
                          std::uint32_t gid, std::uint64_t rdev, Attr* out) {
  return Run(true, [&](Impl& m) {
    std::uint32_t type = mode & S_IFMT;
    if (type == 0) type = S_IFREG;
    if (type == S_IFDIR || type == S_IFLNK) Fail(EINVAL, "Create of a directory or symlink");
    if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK && type != S_IFCHR &&
        type != S_IFBLK) {
      Fail(EINVAL, "unknown file type");
    }
    m.PrepareNewEntry(parent, name);
    const std::int64_t now = NowNs();
    Ino ino = m.NewInode(type | (mode & 07777), uid, gid, 1, 0, rdev, now);
    m.InsertEntry(parent, name, ino);
    m.TouchDir(parent, now);
    Attr a = m.FullAttr(ino);
    if (out) *out = a;
  });
}

int MetadataStore::Mkdir(Ino parent, std::string_view name, std::uint32_t mode, std::uint32_t uid,
                         std::uint32_t gid, Attr* out) {
  return Run(true, [&](Impl& m) {
    m.PrepareNewEntry(parent, name);
    const std::int64_t now = NowNs();
    Ino ino = m.NewInode(S_IFDIR | (mode & 07777), uid, gid, 2, 0, 0, now);
    m.InsertEntry(parent, name, ino);
    m.AddNlink(parent, 1);
    m.TouchDir(parent, now);
    Attr a = m.FullAttr(ino);
    if (out) *out = a;
  });
}

int MetadataStore::Symlink(Ino parent, std::string_view name, std::string_view target,
                           std::uint32_t uid, std::uint32_t gid, Attr* out) {
  return Run(true, [&](Impl& m) {
    if (target.empty()) Fail(ENOENT, "empty symlink target");
    if (target.size() > kMaxSymlinkBytes) Fail(ENAMETOOLONG, "symlink target too long");
    m.PrepareNewEntry(parent, name);
    const std::int64_t now = NowNs();
    Ino ino = m.NewInode(S_IFLNK | 0777, uid, gid, 1, target.size(), 0, now);
    m.S("INSERT INTO fs_symlinks(ino, target) VALUES (?, ?)").U(ino).B(target).Run();
    m.InsertEntry(parent, name, ino);
    m.TouchDir(parent, now);
    Attr a = m.FullAttr(ino);
    if (out) *out = a;
  });
}

int MetadataStore::ReadLink(Ino ino, std::string* target) {
  return Run(false, [&](Impl& m) {
    Attr a = m.Inode(ino);
    if ((a.mode & S_IFMT) != S_IFLNK) Fail(EINVAL, "not a symlink");
    Q q = m.S("SELECT target FROM fs_symlinks WHERE ino = ?");
    q.U(ino);
    if (!q.Next()) Fail(EIO, "symlink without target");
    if (target) *target = q.Str(0);
  });
}

int MetadataStore::Link(Ino ino, Ino new_parent, std::string_view new_name, Attr* out) {
  return Run(true, [&](Impl& m) {
    Attr a = m.Inode(ino);
    if (IsDir(a.mode)) Fail(EPERM, "hard link to a directory");
    if (a.nlink == 0) Fail(ENOENT, "inode was unlinked");
    m.PrepareNewEntry(new_parent, new_name);
    const std::int64_t now = NowNs();
    m.InsertEntry(new_parent, new_name, ino);
    m.AddNlink(ino, 1);
    m.TouchCtime(ino, now);
    m.TouchDir(new_parent, now);
    Attr r = m.FullAttr(ino);
    if (out) *out = r;
  });
}

int MetadataStore::Unlink(Ino parent, std::string_view name, bool* orphaned) {
  return Run(true, [&](Impl& m) {
    if (name.size() > kMaxNameBytes) Fail(ENAMETOOLONG);
    m.Dir(parent);
    if (name == "." || name == "..") Fail(EISDIR);
    auto e = m.Entry(parent, name);
    if (!e) Fail(ENOENT);
    Attr a = m.Inode(*e);
    if (IsDir(a.mode)) Fail(EISDIR, "unlink of a directory");
    const std::int64_t now = NowNs();
    m.DeleteEntry(parent, name);
    m.AddNlink(*e, -1);
    m.TouchCtime(*e, now);
    m.TouchDir(parent, now);
    if (orphaned) *orphaned = a.nlink == 1;
  });
}

int MetadataStore::Rmdir(Ino parent, std::string_view name, Ino* removed_ino) {
  return Run(true, [&](Impl& m) {
    if (name.size() > kMaxNameBytes) Fail(ENAMETOOLONG);
    m.Dir(parent);
    if (name == ".") Fail(EINVAL);
    if (name == "..") Fail(ENOTEMPTY);
    auto e = m.Entry(parent, name);
    if (!e) Fail(ENOENT);
    Attr a = m.Inode(*e);
    if (!IsDir(a.mode)) Fail(ENOTDIR, "rmdir of a non-directory");
    if (!m.DirEmpty(*e)) Fail(ENOTEMPTY);
    const std::int64_t now = NowNs();
    m.DeleteEntry(parent, name);
    m.S("UPDATE fs_inodes SET nlink = 0, ctime_ns = ? WHERE ino = ?").I(now).U(*e).Run();
    m.AddNlink(parent, -1);
    m.TouchDir(parent, now);
    if (removed_ino) *removed_ino = *e;
  });
}

int MetadataStore::Rename(Ino parent, std::string_view name, Ino new_parent,
                          std::string_view new_name, unsigned flags, Ino* orphaned_ino) {
  return Run(true, [&](Impl& m) {
    if (orphaned_ino) *orphaned_ino = 0;
    if ((flags & ~(kRenameNoReplace | kRenameExchange)) != 0 ||
        flags == (kRenameNoReplace | kRenameExchange)) {
      Fail(EINVAL, "bad rename flags");
    }
    if (name.size() > kMaxNameBytes || new_name.size() > kMaxNameBytes) Fail(ENAMETOOLONG);
    m.Dir(parent);
    m.Dir(new_parent);
    CheckName(name);
    CheckName(new_name);
    auto src = m.Entry(parent, name);
    if (!src) Fail(ENOENT, "rename source missing");
    Attr sa = m.Inode(*src);
    auto dst = m.Entry(new_parent, new_name);
    const bool same_entry = parent == new_parent && name == new_name;
    const std::int64_t now = NowNs();

    if (flags & kRenameExchange) {
      if (!dst) Fail(ENOENT, "exchange target missing");
      if (same_entry) return;
      Attr da = m.Inode(*dst);
      if (IsDir(sa.mode) && m.InSubtree(new_parent, *src)) Fail(EINVAL, "into own subtree");
      if (IsDir(da.mode) && m.InSubtree(parent, *dst)) Fail(EINVAL, "into own subtree");
      m.S("UPDATE fs_dirents SET ino = ? WHERE parent = ? AND name = ?")
          .U(*dst).U(parent).B(name).Run();
      m.S("UPDATE fs_dirents SET ino = ? WHERE parent = ? AND name = ?")
          .U(*src).U(new_parent).B(new_name).Run();
      if (parent != new_parent) {
        const int delta = (IsDir(sa.mode) ? 1 : 0) - (IsDir(da.mode) ? 1 : 0);
        if (delta != 0) {
          m.AddNlink(new_parent, delta);
          m.AddNlink(parent, -delta);
        }
      }
      m.TouchCtime(*src, now);
      m.TouchCtime(*dst, now);
      m.TouchDir(parent, now);
      m.TouchDir(new_parent, now);
      return;
    }

    if (dst) {
      if (flags & kRenameNoReplace) Fail(EEXIST, "rename target exists");
      if (*dst == *src) return;  // two links to one inode: POSIX says do nothing
    }
    if (IsDir(sa.mode) && m.InSubtree(new_parent, *src)) Fail(EINVAL, "into own subtree");
    if (dst) {
      Attr da = m.Inode(*dst);
      if (IsDir(sa.mode) && !IsDir(da.mode)) Fail(ENOTDIR, "replacing a non-directory by a dir");
      if (!IsDir(sa.mode) && IsDir(da.mode)) Fail(EISDIR, "replacing a directory by a non-dir");
      if (IsDir(da.mode)) {
        if (!m.DirEmpty(*dst)) Fail(ENOTEMPTY);
        m.S("UPDATE fs_inodes SET nlink = 0, ctime_ns = ? WHERE ino = ?").I(now).U(*dst).Run();
        m.AddNlink(new_parent, -1);
      } else {
        m.AddNlink(*dst, -1);
        m.TouchCtime(*dst, now);
      }
      m.DeleteEntry(new_parent, new_name);
      if (orphaned_ino && (IsDir(da.mode) || da.nlink == 1)) *orphaned_ino = *dst;
    }
    m.S("UPDATE fs_dirents SET parent = ?, name = ? WHERE parent = ? AND name = ?")
        .U(new_parent).B(new_name).U(parent).B(name).Run();
    if (IsDir(sa.mode) && parent != new_parent) {
      m.AddNlink(parent, -1);
      m.AddNlink(new_parent, 1);
    }
    m.TouchCtime(*src, now);
    m.TouchDir(parent, now);
    if (new_parent != parent) m.TouchDir(new_parent, now);
  });
}

int MetadataStore::ReadDir(Ino dir, std::uint64_t after_cookie, std::size_t max,
                           std::vector<DirEntry>* out) {
  return Run(false, [&](Impl& m) {
    m.Dir(dir);
    std::vector<DirEntry> list;
    Q q = m.S("SELECT d.cookie, d.name, d.ino, i.mode FROM fs_dirents d "
              "JOIN fs_inodes i ON i.ino = d.ino "
              "WHERE d.parent = ? AND d.cookie > ? ORDER BY d.cookie LIMIT ?");
    q.U(dir).U(after_cookie).I(static_cast<std::int64_t>(std::min<std::size_t>(max, 1u << 30)));
    while (q.Next()) {
      list.push_back(DirEntry{q.UCol(0), q.Str(1), q.UCol(2),
                              static_cast<std::uint32_t>(q.Col(3)) & S_IFMT});
    }
    if (out) *out = std::move(list);
  });
}

int MetadataStore::SetAttr(Ino ino, const SetAttrIn& in, Attr* out) {
  return Run(true, [&](Impl& m) {
    Attr a = m.Inode(ino);
    if (in.mask & ~(kSetMode | kSetUid | kSetGid | kSetAtime | kSetMtime | kSetCtime)) {
      Fail(EINVAL, "unknown SetAttr bits");
    }
    if (in.mask & kSetMode) a.mode = (a.mode & S_IFMT) | (in.mode & 07777);
    if (in.mask & kSetUid) a.uid = in.uid;
    if (in.mask & kSetGid) a.gid = in.gid;
    if (in.mask & kSetAtime) a.atime_ns = in.atime_ns;
    if (in.mask & kSetMtime) a.mtime_ns = in.mtime_ns;
    a.ctime_ns = (in.mask & kSetCtime) ? in.ctime_ns : NowNs();
    m.S("UPDATE fs_inodes SET mode = ?, uid = ?, gid = ?, atime_ns = ?, mtime_ns = ?, "
        "ctime_ns = ? WHERE ino = ?")
        .I(a.mode).I(a.uid).I(a.gid).I(a.atime_ns).I(a.mtime_ns).I(a.ctime_ns).U(ino)
        .Run();
    Attr r = m.FullAttr(ino);
    if (out) *out = r;
  });
}

int MetadataStore::Truncate(Ino ino, std::uint64_t new_size, std::vector<BlockId>* freed,
                            Attr* out) {
  return Run(true, [&](Impl& m) {
    Attr a = m.Inode(ino);
    if (IsDir(a.mode)) Fail(EISDIR);
    if ((a.mode & S_IFMT) != S_IFREG) Fail(EINVAL, "truncate of a non-regular file");
    if (new_size > static_cast<std::uint64_t>(INT64_MAX)) Fail(EINVAL, "size too large");
    std::vector<BlockId> ids;
    m.FreeBlocksFrom(ino, m.BlocksFor(new_size), &ids);
    if (new_size % m.block_bytes_ != 0) {
      // The ORAM's copy of the new last block keeps its old tail; reading it
      // as zeros lets the file grow again without exposing those bytes.
      m.S("UPDATE fs_blocks SET valid = min(valid, ?) WHERE ino = ? AND idx = ?")
          .U(new_size % m.block_bytes_).U(ino).U(new_size / m.block_bytes_).Run();
    }
    const std::int64_t now = NowNs();
    m.S("UPDATE fs_inodes SET size = ?, mtime_ns = ?, ctime_ns = ? WHERE ino = ?")
        .U(new_size).I(now).I(now).U(ino).Run();
    Attr r = m.FullAttr(ino);
    if (freed) freed->insert(freed->end(), ids.begin(), ids.end());
    if (out) *out = r;
  });
}

int MetadataStore::ForgetOrphan(Ino ino, std::vector<BlockId>* freed) {
  std::vector<BlockId> ids;
  int err = Run(true, [&](Impl& m) {
    auto a = m.FindInode(ino);
    if (!a || a->nlink != 0 || ino == kRootIno) return;
    m.DestroyInode(ino, &ids);
  });
  if (err == 0 && freed) freed->insert(freed->end(), ids.begin(), ids.end());
  return err;
}

int MetadataStore::PurgeOrphans(std::uint64_t* count) {
  return Run(true, [&](Impl& m) {
    std::vector<Ino> orphans;
    {
      Q q = m.S("SELECT ino FROM fs_inodes WHERE nlink = 0 AND ino != 1");
      while (q.Next()) orphans.push_back(q.UCol(0));
    }
    for (Ino ino : orphans) m.DestroyInode(ino, nullptr);
    if (count) *count = orphans.size();
  });
}

// --- xattrs -----------------------------------------------------------------

namespace {
void CheckXattrName(std::string_view name) {
  if (name.empty()) Fail(EINVAL, "empty xattr name");
  if (name.size() > kMaxXattrNameBytes) Fail(ERANGE, "xattr name too long");
}
}  // namespace

int MetadataStore::SetXattr(Ino ino, std::string_view name, std::string_view value, int flags) {
  return Run(true, [&](Impl& m) {
    CheckXattrName(name);
    if ((flags & ~(kXattrCreate | kXattrReplace)) != 0 ||
        flags == (kXattrCreate | kXattrReplace)) {
      Fail(EINVAL, "bad xattr flags");
    }
    if (value.size() > kMaxXattrValueBytes) Fail(E2BIG, "xattr value too large");
    m.Inode(ino);
    bool exists = false;
    {
      Q q = m.S("SELECT 1 FROM fs_xattrs WHERE ino = ? AND name = ?");
      q.U(ino).B(name);
      exists = q.Next();
    }
    if ((flags & kXattrCreate) && exists) Fail(EEXIST);
    if ((flags & kXattrReplace) && !exists) Fail(ENODATA);
    m.S("INSERT OR REPLACE INTO fs_xattrs(ino, name, value) VALUES (?, ?, ?)")
        .U(ino).B(name).B(value).Run();
    m.TouchCtime(ino, NowNs());
  });
}

int MetadataStore::GetXattr(Ino ino, std::string_view name, std::string* value) {
  return Run(false, [&](Impl& m) {
    CheckXattrName(name);
    m.Inode(ino);
    Q q = m.S("SELECT value FROM fs_xattrs WHERE ino = ? AND name = ?");
    q.U(ino).B(name);
    if (!q.Next()) Fail(ENODATA);
    if (value) *value = q.Str(0);
  });
}

int MetadataStore::ListXattr(Ino ino, std::vector<std::string>* names) {
  return Run(false, [&](Impl& m) {
    m.Inode(ino);
    std::vector<std::string> list;
    Q q = m.S("SELECT name FROM fs_xattrs WHERE ino = ? ORDER BY name");
    q.U(ino);
    while (q.Next()) list.push_back(q.Str(0));
    if (names) *names = std::move(list);
  });
}

int MetadataStore::RemoveXattr(Ino ino, std::string_view name) {
  return Run(true, [&](Impl& m) {
    CheckXattrName(name);
    m.Inode(ino);
    m.S("DELETE FROM fs_xattrs WHERE ino = ? AND name = ?").U(ino).B(name).Run();
    if (sqlite3_changes(m.db_) == 0) Fail(ENODATA);
    m.TouchCtime(ino, NowNs());
  });
}

// --- blocks -----------------------------------------------------------------

int MetadataStore::GetBlock(Ino ino, std::uint64_t idx, std::optional<BlockId>* out) {
  return Run(false, [&](Impl& m) {
    Attr a = m.Inode(ino);
    if (IsDir(a.mode)) Fail(EISDIR);
    Q q = m.S("SELECT block_id FROM fs_blocks WHERE ino = ? AND idx = ?");
    q.U(ino).U(idx);
    std::optional<BlockId> r;
    if (q.Next()) r = q.UCol(0);
    if (out) *out = r;
  });
}

int MetadataStore::MapBlock(Ino ino, std::uint64_t idx, std::uint64_t min_size, BlockId* out) {
  return Run(true, [&](Impl& m) {
    Attr a = m.Inode(ino);
    if (IsDir(a.mode)) Fail(EISDIR);
    if ((a.mode & S_IFMT) != S_IFREG) Fail(EINVAL, "blocks of a non-regular file");
    if (idx >= static_cast<std::uint64_t>(INT64_MAX) / m.block_bytes_ ||
        min_size > static_cast<std::uint64_t>(INT64_MAX)) {
      Fail(EFBIG, "offset too large");
    }
    std::optional<BlockId> id;
    {
      Q q = m.S("SELECT block_id FROM fs_blocks WHERE ino = ? AND idx = ?");
      q.U(ino).U(idx);
      if (q.Next()) id = q.UCol(0);
    }
    if (!id) {
      if (m.BlocksFor(std::max(a.size, min_size)) <= idx) {
        Fail(EINVAL, "block lies beyond the file size and min_size");
      }
      id = m.AllocateBlock();
      m.S("INSERT INTO fs_blocks(ino, idx, block_id) VALUES (?, ?, ?)").U(ino).U(idx).U(*id).Run();
    }
    if (min_size > a.size) {
      const std::int64_t now = NowNs();
      m.S("UPDATE fs_inodes SET size = ?, mtime_ns = ?, ctime_ns = ? WHERE ino = ?")
          .U(min_size).I(now).I(now).U(ino).Run();
    }
    if (out) *out = *id;
  });
}

int MetadataStore::GetBlocks(Ino ino, std::uint64_t first_idx, std::uint64_t count,
                             std::vector<BlockMapping>* out, Attr* attr) {
  return Run(false, [&](Impl& m) {
    Attr a = m.FullAttr(ino);
    if (IsDir(a.mode)) Fail(EISDIR);
    std::vector<BlockMapping> r;
    if (count > 0) {
      const std::uint64_t last = first_idx + std::min(count - 1, UINT64_MAX - first_idx);
      Q q = m.S("SELECT idx, block_id, valid, slot, slots, next_id, next_slot, next_slots "
                "FROM fs_blocks WHERE ino = ? AND idx >= ? AND idx <= ? ORDER BY idx");
      q.U(ino).I(m.ClampIdx(first_idx)).I(m.ClampIdx(last));
      while (q.Next()) r.push_back(Impl::RowMapping(q));
    }
    if (out) *out = std::move(r);
    if (attr) *attr = a;
  });
}

int MetadataStore::PrepareWrite(Ino ino, std::uint64_t offset, std::uint64_t length,
                                std::vector<BlockMapping>* out, Attr* old_attr) {
  return Run(true, [&](Impl& m) {
    Attr a = m.FullAttr(ino);
    if (IsDir(a.mode)) Fail(EISDIR);
    if ((a.mode & S_IFMT) != S_IFREG) Fail(EINVAL, "blocks of a non-regular file");
    constexpr std::uint64_t kMax = static_cast<std::uint64_t>(INT64_MAX);
    if (offset > kMax || length > kMax - offset) Fail(EFBIG, "offset too large");
    const std::uint64_t end = offset + length;
    std::vector<BlockMapping> r;
    if (length > 0) {
      const std::uint64_t first = offset / m.block_bytes_;
      const std::uint64_t last = (end - 1) / m.block_bytes_;
      std::map<std::uint64_t, BlockMapping> mapped;
      {
        Q q = m.S("SELECT idx, block_id, valid, slot, slots, next_id, next_slot, next_slots "
                  "FROM fs_blocks WHERE ino = ? AND idx >= ? AND idx <= ? ORDER BY idx");
        q.U(ino).U(first).U(last);
        while (q.Next()) {
          BlockMapping bm = Impl::RowMapping(q);
          mapped[bm.idx] = bm;
        }
      }
      const BlockLayout& lay = m.layout_;
      for (std::uint64_t idx = first; idx <= last; ++idx) {
        // The file's bytes in this block after the write start at its
        // offset 0 (extents hold a block's leading bytes) and end here.
        const auto need = static_cast<std::uint32_t>(
            std::min<std::uint64_t>(m.block_bytes_, end - idx * m.block_bytes_));
        auto it = mapped.find(idx);
        if (it == mapped.end()) {
          const Extent e = m.AllocateExtent(lay.SlotsFor(need));
          m.S("INSERT INTO fs_blocks(ino, idx, block_id, slot, slots, valid) "
              "VALUES (?, ?, ?, ?, ?, 0)")
              .U(ino).U(idx).U(e.id).I(e.slot).I(e.slots).Run();
          r.push_back(BlockMapping{idx, e.id, 0, e.slot, e.slots, std::nullopt});
          continue;
        }
        BlockMapping bm = it->second;
        if (lay.Holds(bm.target().slots, need)) {
          r.push_back(bm);
          continue;
        }
        // Too small. What it must hold from now on: the write, and whatever
        // the daemon may already have cached for the old target.
        const std::uint32_t want =
            lay.SlotsFor(std::max<std::uint32_t>(need, lay.Bytes(bm.target())));
        if (bm.valid == 0) {
          // Nothing of the file's is in the ORAM yet: replace in place.
          m.FreeExtent(bm.at(), nullptr);
          if (bm.next) m.FreeExtent(*bm.next, nullptr);
          const Extent e = m.AllocateExtent(want);
          m.S("UPDATE fs_blocks SET block_id = ?, slot = ?, slots = ?, next_id = NULL, "
              "next_slot = NULL, next_slots = NULL WHERE ino = ? AND idx = ?")
              .U(e.id).I(e.slot).I(e.slots).U(ino).U(idx).Run();
          r.push_back(BlockMapping{idx, e.id, 0, e.slot, e.slots, std::nullopt});
          continue;
        }
        // The old extent keeps the data until a write-back lands in the new.
        if (bm.next) m.FreeExtent(*bm.next, nullptr);
        bm.next = m.AllocateExtent(want);
        m.SetNext(ino, idx, bm.next);
        r.push_back(bm);
      }
    }
    const std::int64_t now = NowNs();
    m.S("UPDATE fs_inodes SET size = ?, mtime_ns = ?, ctime_ns = ? WHERE ino = ?")
        .U(std::max(a.size, end)).I(now).I(now).U(ino).Run();
    if (out) *out = std::move(r);
    if (old_attr) *old_attr = a;
  });
}

int MetadataStore::MarkWritten(const std::vector<WrittenExtent>& written) {
  if (written.empty()) return 0;
  return Run(true, [&](Impl& m) {
    // valid = the part of the block below the file's current size, within
    // the extent. The daemon's cached copy is zero past the size, so
    // whatever it wrote back past the size at the time of its copy is zeros
    // as well.
    for (const WrittenExtent& w : written) {
      auto bm = m.FindMapping(w.ino, w.idx);
      if (!bm) continue;
      auto attr = m.FindInode(w.ino);
      if (!attr) continue;
      const std::uint64_t start = w.idx * m.block_bytes_;
      const std::uint64_t in_size = attr->size > start ? attr->size - start : 0;
      const auto valid = static_cast<std::uint32_t>(
          std::min<std::uint64_t>(m.layout_.Bytes(w.extent), in_size));
      if (w.extent == bm->at()) {
        m.S("UPDATE fs_blocks SET valid = ? WHERE ino = ? AND idx = ?")
            .I(valid).U(w.ino).U(w.idx).Run();
      } else if (bm->next && w.extent == *bm->next) {
        // The relocation landed: the new extent holds the whole block.
        m.FreeExtent(bm->at(), nullptr);
        m.S("UPDATE fs_blocks SET block_id = ?, slot = ?, slots = ?, valid = ?, next_id = NULL, "
            "next_slot = NULL, next_slots = NULL WHERE ino = ? AND idx = ?")
            .U(w.extent.id).I(w.extent.slot).I(w.extent.slots).I(valid).U(w.ino).U(w.idx).Run();
      }
    }
  });
}

int MetadataStore::StatFs(FsStats* out) {
  return Run(false, [&](Impl& m) {
    FsStats s;
    s.total_blocks = capacity_;
    s.block_bytes = block_bytes_;
    {
      // Free space in slots: blocks never used or on the free list, plus
      // the free slots of shared blocks.
      const std::uint64_t spb = layout_.slots_per_block();
      const std::uint64_t next = m.MetaGet("next_unused");
      std::uint64_t free_listed = 0, shared = 0, shared_used = 0;
      {
        Q q = m.S("SELECT count(*) FROM fs_free_blocks");
        q.Next();
        free_listed = q.UCol(0);
      }
      {
        Q q = m.S("SELECT count(*), coalesce(sum(nused), 0) FROM fs_shared");
        q.Next();
        shared = q.UCol(0);
        shared_used = q.UCol(1);
      }
      const std::uint64_t untouched = capacity_ - std::min(capacity_, next);
      const std::uint64_t free_slots =
          (untouched + free_listed) * spb + (shared * spb - std::min(shared * spb, shared_used));
      s.free_blocks = std::min(capacity_, free_slots / spb);
    }
    {
      Q q = m.S("SELECT count(*) FROM fs_inodes");
      q.Next();
      s.inodes = q.UCol(0);
    }
    if (out) *out = s;
  });
}

int MetadataStore::Sync() {
  std::lock_guard<std::mutex> lock(mu_);
  // A commit under synchronous=FULL fsyncs the WAL, which holds every earlier
  // commit too; a commit needs a change, so bump a counter.
  Status s = Exec(db_, "PRAGMA synchronous = FULL");
  if (s.ok()) {
    s = Exec(db_,
             "BEGIN IMMEDIATE; UPDATE fs_meta SET value = value + 1 WHERE key = 'sync_count'; "
             "COMMIT");
    if (!s.ok()) (void)Exec(db_, "ROLLBACK");
  }
  Status restore = Exec(db_, "PRAGMA synchronous = NORMAL");
  if (s.ok()) s = restore;
  if (!s.ok()) {
    last_error_ = s.message();
    return EIO;
  }
  return 0;
}

Status MetadataStore::CheckInvariants() {
  std::string problem;
  int err = Run(false, [&](Impl& m) {
    auto bad = [&](const std::string& p) {
      problem = p;
      Fail(EUCLEAN);
    };
    struct Node {
      std::uint32_t mode;
      std::uint32_t nlink;
      std::uint64_t size;
    };
    std::map<Ino, Node> inodes;
    {
      Q q = m.S("SELECT ino, mode, nlink, size FROM fs_inodes");
      while (q.Next()) {
        inodes[q.UCol(0)] = Node{static_cast<std::uint32_t>(q.Col(1)),
                                 static_cast<std::uint32_t>(q.Col(2)), q.UCol(3)};
      }
    }
    auto root = inodes.find(kRootIno);
    if (root == inodes.end() || !IsDir(root->second.mode)) bad("root inode missing or not a dir");
    std::map<Ino, std::uint64_t> links, subdirs, children;
    std::map<Ino, Ino> parent_of;
    {
      Q q = m.S("SELECT parent, name, ino FROM fs_dirents");
      while (q.Next()) {
        Ino parent = q.UCol(0), ino = q.UCol(2);
        std::string name = q.Str(1);
        auto p = inodes.find(parent);
        auto c = inodes.find(ino);
        if (p == inodes.end() || !IsDir(p->second.mode)) {
          bad("entry '" + name + "' in missing or non-directory " + std::to_string(parent));
        }
        if (c == inodes.end()) bad("entry '" + name + "' points to missing inode " +
                                   std::to_string(ino));
        if (name.empty() || name.size() > kMaxNameBytes || name == "." || name == ".." ||
            name.find('/') != std::string::npos) {
          bad("invalid entry name in directory " + std::to_string(parent));
        }
        if (ino == kRootIno) bad("an entry points to the root");
        links[ino]++;
        children[parent]++;
        if (IsDir(c->second.mode)) {
          subdirs[parent]++;
          parent_of[ino] = parent;
        }
      }
    }
    for (const auto& [ino, n] : inodes) {
      if (IsDir(n.mode)) {
        if (ino == kRootIno) {
          if (n.nlink != 2 + subdirs[ino]) bad("root nlink " + std::to_string(n.nlink));
          continue;
        }
        if (n.nlink == 0) {
          if (links[ino] != 0 || children[ino] != 0) {
            bad("removed directory " + std::to_string(ino) + " still linked or not empty");
          }
          continue;
        }
        if (links[ino] != 1) bad("directory " + std::to_string(ino) + " has " +
                                 std::to_string(links[ino]) + " entries");
        if (n.nlink != 2 + subdirs[ino]) {
          bad("directory " + std::to_string(ino) + " nlink " + std::to_string(n.nlink) +
              " != 2 + " + std::to_string(subdirs[ino]) + " subdirectories");
        }
        // Reachable from the root without a cycle.
        Ino cur = ino;
        std::size_t steps = 0;
        while (cur != kRootIno) {
          if (++steps > inodes.size()) bad("directory cycle at " + std::to_string(ino));
          cur = parent_of[cur];
        }
      } else if (n.nlink != links[ino]) {
        bad("inode " + std::to_string(ino) + " nlink " + std::to_string(n.nlink) + " != " +
            std::to_string(links[ino]) + " entries");
      }
    }
    // Symlink targets exactly for symlinks.
    {
      std::uint64_t symlinks = 0;
      for (const auto& [ino, n] : inodes) symlinks += (n.mode & S_IFMT) == S_IFLNK ? 1 : 0;
      Q q = m.S("SELECT ino FROM fs_symlinks");
      std::uint64_t rows = 0;
      while (q.Next()) {
        auto it = inodes.find(q.UCol(0));
        if (it == inodes.end() || (it->second.mode & S_IFMT) != S_IFLNK) {
          bad("symlink target for non-symlink " + std::to_string(q.UCol(0)));
        }
        ++rows;
      }
      if (rows != symlinks) bad("symlink without target");
    }
    {
      Q q = m.S("SELECT count(*) FROM fs_xattrs WHERE ino NOT IN (SELECT ino FROM fs_inodes)");
      q.Next();
      if (q.Col(0) != 0) bad("xattrs of missing inodes");
    }
    // Blocks.
    const std::uint64_t next = m.MetaGet("next_unused");
    if (next > m.capacity_) bad("next_unused beyond capacity");
    const BlockLayout& lay = m.layout_;
    std::set<BlockId> whole;                     // blocks mapped whole
    std::map<BlockId, std::uint64_t> fragments;  // shared block -> union of its fragments
    auto check_extent = [&](const Extent& e, const std::string& who) {
      if (e.id >= next) bad(who + ": block id " + std::to_string(e.id) + " beyond next_unused");
      if (e.whole()) {
        if (!whole.insert(e.id).second) bad("block id " + std::to_string(e.id) + " mapped twice");
        return;
      }
      if (e.slots >= lay.slots_per_block() || e.slot >= lay.slots_per_block() ||
          e.slot + e.slots > lay.slots_per_block()) {
        bad(who + ": fragment slots " + std::to_string(e.slot) + "+" + std::to_string(e.slots) +
            " do not fit a block of " + std::to_string(lay.slots_per_block()));
      }
      const std::uint64_t mask = BlockLayout::Mask(e.slot, e.slots);
      std::uint64_t& u = fragments[e.id];
      if (u & mask) bad("fragments overlap in block " + std::to_string(e.id));
      u |= mask;
    };
    {
      Q q = m.S("SELECT idx, block_id, valid, slot, slots, next_id, next_slot, next_slots, ino "
                "FROM fs_blocks");
      while (q.Next()) {
        const BlockMapping bm = Impl::RowMapping(q);
        const Ino ino = q.UCol(8);
        const std::int64_t valid = q.Col(2);
        const std::string who = "inode " + std::to_string(ino) + " block " + std::to_string(bm.idx);
        auto it = inodes.find(ino);
        if (it == inodes.end()) bad("block " + std::to_string(bm.id) + " of missing inode");
        if ((it->second.mode & S_IFMT) != S_IFREG) bad("block of a non-regular file");
        if (bm.idx >= m.BlocksFor(it->second.size)) {
          bad("inode " + std::to_string(ino) + " maps block index " + std::to_string(bm.idx) +
              " beyond its size " + std::to_string(it->second.size));
        }
        const std::uint64_t in_size = it->second.size - std::min(it->second.size,
                                                                  bm.idx * m.block_bytes_);
        if (valid < 0 || static_cast<std::uint64_t>(valid) >
                             std::min<std::uint64_t>(lay.Bytes(bm.at()), in_size)) {
          bad(who + " has valid length " + std::to_string(valid) +
              " beyond the file size or its extent");
        }
        check_extent(bm.at(), who);
        if (bm.next) check_extent(*bm.next, who + " (relocation target)");
      }
    }
    std::uint64_t shared_rows = 0;
    {
      Q q = m.S("SELECT block_id, used, nused, longest FROM fs_shared");
      while (q.Next()) {
        const BlockId id = q.UCol(0);
        const std::uint64_t used = q.UCol(1);
        ++shared_rows;
        auto f = fragments.find(id);
        if (f == fragments.end()) {
          bad("shared block " + std::to_string(id) + " holds no fragment");
        } else if (f->second != used) {
          bad("shared block " + std::to_string(id) + " slot map disagrees with its fragments");
        }
        if (q.Col(2) != std::popcount(used) ||
            q.Col(3) != static_cast<std::int64_t>(lay.LongestFree(used))) {
          bad("shared block " + std::to_string(id) + " counts disagree with its slot map");
        }
        if (whole.count(id)) bad("block id " + std::to_string(id) + " both shared and whole");
      }
    }
    if (shared_rows != fragments.size()) bad("a block holds fragments but is not shared");
    std::uint64_t free_count = 0;
    {
      Q q = m.S("SELECT block_id FROM fs_free_blocks");
      while (q.Next()) {
        BlockId id = q.UCol(0);
        if (id >= next) bad("free block id " + std::to_string(id) + " beyond next_unused");
        if (whole.count(id) || fragments.count(id)) {
          bad("block id " + std::to_string(id) + " both free and mapped");
        }
        ++free_count;
      }
    }
    if (whole.size() + fragments.size() + free_count != next) {
      bad("block accounting: " + std::to_string(whole.size()) + " whole + " +
          std::to_string(fragments.size()) + " shared + " + std::to_string(free_count) +
          " free != " + std::to_string(next) + " allocated");
    }
  });
  if (err == 0) return Status::Ok();
  if (err == EUCLEAN) return Status::Corruption("filesystem metadata: " + problem);
  return Status::IoError("checking filesystem metadata: " + last_error());
}

}  // namespace s3oram::fs

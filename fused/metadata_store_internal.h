// What the files implementing MetadataStore share (metadata_store.cpp,
// metadata_names.cpp, metadata_xattrs.cpp, metadata_blocks.cpp,
// metadata_invariants.cpp): the error scheme of operation bodies, the cached
// statement in use (Q), MetadataStore::Impl (the row-level helpers every
// operation is made of) and Run (one operation, one transaction). Nothing
// outside those files includes it.
//
// Operation bodies report failure by throwing FsFail (an errno and a
// message); Run() catches it, rolls the transaction back and returns the
// errno. Nothing throws out of the public API.
#pragma once

#include <sqlite3.h>
#include <sys/stat.h>
#include <time.h>

#include <cerrno>
#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fused/metadata_schema.h"
#include "fused/metadata_store.h"
#include "oramcore/base/fault_point.h"
#include "oramcore/state/sql.h"

namespace s3oram::fs {
namespace metadata_detail {

using sql::FromSql;
using sql::ToSql;

inline constexpr int kBusyTimeoutMs = 5000;

struct FsFail {
  int err;
  std::string msg;
};

[[noreturn]] inline void Fail(int err, std::string msg = {}) { throw FsFail{err, std::move(msg)}; }

inline std::int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline bool IsDir(std::uint32_t mode) { return (mode & S_IFMT) == S_IFDIR; }

inline void CheckName(std::string_view name) {
  if (name.size() > kMaxNameBytes) Fail(ENAMETOOLONG, "name too long");
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos) {
    Fail(EINVAL, "invalid name");
  }
}

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
    return p ? std::string(static_cast<const char*>(p), static_cast<std::size_t>(n))
             : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_;
  int n_ = 0;
};

}  // namespace metadata_detail

using metadata_detail::CheckName;
using metadata_detail::Fail;
using metadata_detail::FromSql;
using metadata_detail::FsFail;
using metadata_detail::IsDir;
using metadata_detail::NowNs;
using metadata_detail::Q;
using metadata_detail::ToSql;

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
    Status s = sql::Exec(db_, sql);
    if (!s.ok()) Fail(EIO, s.message());
  }

  std::optional<Attr> FindInode(Ino ino) {
    Q q =
        S("SELECT mode, uid, gid, nlink, size, rdev, atime_ns, mtime_ns, ctime_ns "
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
    Q q =
        S("SELECT coalesce(sum(CASE WHEN slots = 0 THEN ? ELSE slots * ? END), 0) "
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
        .I(mode)
        .I(uid)
        .I(gid)
        .I(nlink)
        .U(size)
        .U(rdev)
        .I(now)
        .I(now)
        .I(now)
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
    Q q =
        S("SELECT idx, block_id, valid, slot, slots, next_id, next_slot, next_slots "
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
          .U(id)
          .I(layout_.slots_per_block())
          .Run();
    }
    const int slot = layout_.FirstFit(used, slots);
    if (slot < 0) Fail(EIO, "fs_shared longest free run is wrong for block " + std::to_string(id));
    SetShared(id, used | BlockLayout::Mask(static_cast<std::uint32_t>(slot), slots));
    return Extent{id, static_cast<std::uint32_t>(slot), slots};
  }

  void SetShared(BlockId id, std::uint64_t used) {
    S("UPDATE fs_shared SET used = ?, nused = ?, longest = ? WHERE block_id = ?")
        .U(used)
        .I(std::popcount(used))
        .I(layout_.LongestFree(used))
        .U(id)
        .Run();
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
    Q q =
        S("UPDATE fs_blocks SET next_id = ?, next_slot = ?, next_slots = ? "
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
      Q q =
          S("SELECT idx, block_id, valid, slot, slots, next_id, next_slot, next_slots "
            "FROM fs_blocks WHERE ino = ? AND idx >= ? ORDER BY idx");
      q.U(ino).U(first_idx);
      while (q.Next()) maps.push_back(RowMapping(q));
    }
    if (maps.empty()) return;
    S("DELETE FROM fs_blocks WHERE ino = ? AND idx >= ?").U(ino).U(first_idx).Run();
    S("DELETE FROM fs_lost WHERE ino = ? AND idx >= ?").U(ino).U(first_idx).Run();
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

template <typename F>
int MetadataStore::Run(bool write, F&& body) {
  std::lock_guard<std::mutex> lock(mu_);
  last_error_.clear();  // never report an earlier operation's failure
  Status s = sql::Exec(db_, write ? "BEGIN IMMEDIATE" : "BEGIN");
  if (!s.ok()) {
    last_error_ = s.message();
    return EIO;
  }
  try {
    body(*impl_);
    if (write) FaultPoint("metadata.commit.before");
    s = sql::Exec(db_, "COMMIT");
    if (write && s.ok()) FaultPoint("metadata.commit.after");
    if (!s.ok()) {
      (void)sql::Exec(db_, "ROLLBACK");
      last_error_ = s.message();
      return EIO;
    }
    return 0;
  } catch (const FsFail& f) {
    (void)sql::Exec(db_, "ROLLBACK");
    if (f.err == EIO) last_error_ = f.msg;
    return f.err;
  } catch (const std::bad_alloc&) {
    (void)sql::Exec(db_, "ROLLBACK");
    last_error_ = "out of memory";
    return ENOMEM;
  } catch (const std::exception& e) {
    (void)sql::Exec(db_, "ROLLBACK");
    last_error_ = e.what();
    return EIO;
  }
}

}  // namespace s3oram::fs

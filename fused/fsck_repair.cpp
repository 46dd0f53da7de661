// Fsck repairs (fsck.h, ApplyFsckRepairs): one IMMEDIATE transaction per
// phase, all or nothing.
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "fused/fsck.h"
#include "fused/fsck_internal.h"
#include "oramcore/state/sql.h"

namespace s3oram::fs {

using namespace fsck_detail;
using sql::FromSql;
using sql::ToSql;

// --- repairs ----------------------------------------------------------------------

namespace {

// fs_shared recomputed from the fragments fs_blocks maps now (inside the
// repair transaction, after the plan's unmaps).
Status RewriteShared(sqlite3* db) {
  std::int64_t block_bytes = 0;
  {
    sql::Stmt q(db, "SELECT value FROM fs_meta WHERE key = 'block_bytes'");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
    Status err;
    if (!q.Next(&err)) return err.ok() ? Status::Corruption("fs_meta lacks block_bytes") : err;
    block_bytes = q.ColumnInt(0);
  }
  const BlockLayout layout(static_cast<std::uint32_t>(block_bytes));
  std::map<BlockId, std::uint64_t> masks;
  {
    sql::Stmt q(db,
                "SELECT block_id, slot, slots FROM fs_blocks WHERE slots > 0 UNION ALL "
                "SELECT next_id, next_slot, next_slots FROM fs_blocks WHERE next_slots > 0");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
    Status err;
    while (q.Next(&err)) {
      masks[q.ColumnU64(0)] |= BlockLayout::Mask(static_cast<std::uint32_t>(q.ColumnInt(1)),
                                                 static_cast<std::uint32_t>(q.ColumnInt(2)));
    }
    S3ORAM_RETURN_IF_ERROR(err);
  }
  S3ORAM_RETURN_IF_ERROR(sql::Exec(db, "DELETE FROM fs_shared"));
  for (const auto& [id, used] : masks) {
    sql::Stmt q(db,
                "INSERT INTO fs_shared(block_id, used, nused, longest) VALUES (?1, ?2, ?3, ?4)");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
    S3ORAM_RETURN_IF_ERROR(q.Int(1, ToSql(id))
                               .Int(2, ToSql(used))
                               .Int(3, std::popcount(used))
                               .Int(4, layout.LongestFree(used))
                               .Exec("repair"));
  }
  return Status::Ok();
}

// One statement of a repair, its parameters bound as integers ?1, ?2, ...
// in order.
Status ExecRepair(sqlite3* db, const char* sql, std::initializer_list<std::int64_t> params) {
  sql::Stmt q(db, sql);
  S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
  int i = 1;
  for (std::int64_t v : params) q.Int(i++, v);
  return q.Exec("repair");
}

// The repairs of one plan inside the transaction ApplyFsckRepairs opened;
// any error leaves the rollback to it.
class RepairPlan {
 public:
  explicit RepairPlan(sqlite3* db) : db_(db) {}

  Status Apply(const std::vector<FsckRepair>& repairs) {
    // fs_lost may not exist yet (a state no daemon of this version opened).
    S3ORAM_RETURN_IF_ERROR(sql::Exec(db_, kFsLostTableSql));
    {
      timespec ts{};
      clock_gettime(CLOCK_REALTIME, &ts);
      now_ = static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
    }
    for (const FsckRepair& f : repairs) S3ORAM_RETURN_IF_ERROR(ApplyOne(f));
    // A lost mark belongs to a mapped block (metadata_schema.h): one whose
    // mapping a repair removed, or whose inode is gone, is dropped with it.
    S3ORAM_RETURN_IF_ERROR(
        sql::Exec(db_,
                  "DELETE FROM fs_lost WHERE NOT EXISTS (SELECT 1 FROM fs_blocks b WHERE "
                  "b.ino = fs_lost.ino AND b.idx = fs_lost.idx)"));
    return sql::Exec(db_, "COMMIT");
  }

 private:
  Status ApplyOne(const FsckRepair& f) {
    using K = FsckRepair::Kind;
    switch (f.kind) {
      case K::kDeletePosition:
        return ExecRepair(db_, "DELETE FROM positions WHERE id = ?1", {ToSql(f.a)});
      case K::kDeleteEntry:
        return ExecRepair(db_, "DELETE FROM fs_dirents WHERE cookie = ?1", {ToSql(f.a)});
      case K::kCreateLostFound:
        return CreateLostFound(f);
      case K::kLinkLostFound:
        return LinkLostFound(f);
      case K::kSetNlink:
        return ExecRepair(db_, "UPDATE fs_inodes SET nlink = ?1, ctime_ns = ?2 WHERE ino = ?3",
                          {ToSql(f.b), now_, ToSql(f.a)});
      case K::kUnmapBlock:
        // The id is returned to the free list by a kAddFree of the same
        // plan if it is in the allocated range.
        for (const char* sql : {"DELETE FROM fs_blocks WHERE ino = ?1 AND idx = ?2",
                                "DELETE FROM fs_lost WHERE ino = ?1 AND idx = ?2"}) {
          S3ORAM_RETURN_IF_ERROR(ExecRepair(db_, sql, {ToSql(f.a), ToSql(f.b)}));
        }
        return Status::Ok();
      case K::kSetValid:
        return ExecRepair(db_, "UPDATE fs_blocks SET valid = ?1 WHERE ino = ?2 AND idx = ?3",
                          {ToSql(f.c), ToSql(f.a), ToSql(f.b)});
      case K::kClearNext:
        return ExecRepair(
            db_,
            "UPDATE fs_blocks SET next_id = NULL, next_slot = NULL, next_slots = NULL "
            "WHERE ino = ?1 AND idx = ?2",
            {ToSql(f.a), ToSql(f.b)});
      case K::kRewriteShared:
        return RewriteShared(db_);
      case K::kAddFree:
        return ExecRepair(db_, "INSERT OR IGNORE INTO fs_free_blocks(block_id) VALUES (?1)",
                          {ToSql(f.a)});
      case K::kRemoveFree:
        return ExecRepair(db_, "DELETE FROM fs_free_blocks WHERE block_id = ?1", {ToSql(f.a)});
      case K::kSetNextUnused:
        return ExecRepair(db_, "UPDATE fs_meta SET value = ?1 WHERE key = 'next_unused'",
                          {ToSql(f.a)});
      case K::kDeleteSymlinkRow:
        return ExecRepair(db_, "DELETE FROM fs_symlinks WHERE ino = ?1", {ToSql(f.a)});
      case K::kClearLost:
        return ExecRepair(db_, "DELETE FROM fs_lost WHERE ino = ?1 AND idx = ?2",
                          {ToSql(f.a), ToSql(f.b)});
      case K::kDeleteStrayXattrs:
        return sql::Exec(db_, "DELETE FROM fs_xattrs WHERE ino NOT IN (SELECT ino FROM fs_inodes)");
    }
    return Status::Ok();
  }

  // /lost+found as created by this plan, or else as the root holds it.
  Status FindLostFound() {
    if (lost_found_) return Status::Ok();
    sql::Stmt q(db_, "SELECT ino FROM fs_dirents WHERE parent = 1 AND name = ?1");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("finding lost+found"));
    q.Blob(1, kLostFoundName);
    Status err;
    if (!q.Next(&err)) return err.ok() ? Status::FailedPrecondition("no /lost+found") : err;
    lost_found_ = q.ColumnU64(0);
    return Status::Ok();
  }

  Status CreateLostFound(const FsckRepair& f) {
    sql::Stmt q(db_,
                "INSERT INTO fs_inodes(mode, uid, gid, nlink, size, rdev, atime_ns, mtime_ns, "
                "ctime_ns) VALUES (?1, ?2, ?3, ?4, 0, 0, ?5, ?5, ?5)");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
    S3ORAM_RETURN_IF_ERROR(q.Int(1, S_IFDIR | 0700)
                               .Int(2, ToSql(f.a))
                               .Int(3, ToSql(f.b))
                               .Int(4, ToSql(f.c))
                               .Int(5, now_)
                               .Exec("repair"));
    lost_found_ = FromSql(sqlite3_last_insert_rowid(db_));
    sql::Stmt e(db_, "INSERT INTO fs_dirents(parent, name, ino) VALUES (1, ?1, ?2)");
    S3ORAM_RETURN_IF_ERROR(e.status().WithContext("repair"));
    return e.Blob(1, kLostFoundName).Int(2, ToSql(*lost_found_)).Exec("repair");
  }

  Status LinkLostFound(const FsckRepair& f) {
    S3ORAM_RETURN_IF_ERROR(FindLostFound());
    sql::Stmt e(db_, "INSERT INTO fs_dirents(parent, name, ino) VALUES (?1, ?2, ?3)");
    S3ORAM_RETURN_IF_ERROR(e.status().WithContext("repair"));
    S3ORAM_RETURN_IF_ERROR(
        e.Int(1, ToSql(*lost_found_)).Blob(2, f.name).Int(3, ToSql(f.a)).Exec("repair"));
    sql::Stmt t(db_, "UPDATE fs_inodes SET mtime_ns = ?1, ctime_ns = ?1 WHERE ino = ?2");
    S3ORAM_RETURN_IF_ERROR(t.status().WithContext("repair"));
    return t.Int(1, now_).Int(2, ToSql(*lost_found_)).Exec("repair");
  }

  sqlite3* db_;
  std::optional<Ino> lost_found_;
  std::int64_t now_ = 0;  // the time every repaired inode is stamped with
};

}  // namespace

Status ApplyFsckRepairs(UnlockedState& state, const std::vector<FsckRepair>& repairs) {
  if (repairs.empty()) return Status::Ok();
  const std::string& state_path = state.path();
  S3ORAM_ASSIGN_OR_RETURN(sqlite3 * db, state.OpenDatabase());
  struct Closer {
    sqlite3* db;
    ~Closer() { sqlite3_close_v2(db); }
  } closer{db};
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  // FULL: a repair is rare and must not be lost to a power failure.
  S3ORAM_RETURN_IF_ERROR(sql::Exec(db, "PRAGMA synchronous = FULL"));
  S3ORAM_RETURN_IF_ERROR(sql::Exec(db, "BEGIN IMMEDIATE").WithContext(state_path));
  Status s = RepairPlan(db).Apply(repairs);
  if (!s.ok()) {
    if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return s.WithContext(state_path + ": repairs (nothing changed)");
  }
  return Status::Ok();
}

}  // namespace s3oram::fs

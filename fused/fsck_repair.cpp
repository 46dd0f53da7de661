// Fsck repairs (fsck.h, ApplyFsckRepairs): one IMMEDIATE transaction per
// phase, all or nothing.
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
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
  auto apply = [&]() -> Status {
    // fs_lost may not exist yet (a state no daemon of this version opened).
    S3ORAM_RETURN_IF_ERROR(sql::Exec(db, kFsLostTableSql));
    std::optional<Ino> lost_found;
    auto find_lost_found = [&]() -> Status {
      if (lost_found) return Status::Ok();
      sql::Stmt q(db, "SELECT ino FROM fs_dirents WHERE parent = 1 AND name = ?1");
      S3ORAM_RETURN_IF_ERROR(q.status().WithContext("finding lost+found"));
      q.Blob(1, kLostFoundName);
      Status err;
      if (!q.Next(&err)) return err.ok() ? Status::FailedPrecondition("no /lost+found") : err;
      lost_found = q.ColumnU64(0);
      return Status::Ok();
    };
    std::int64_t now = 0;
    {
      timespec ts{};
      clock_gettime(CLOCK_REALTIME, &ts);
      now = static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
    }
    for (const FsckRepair& f : repairs) {
      using K = FsckRepair::Kind;
      switch (f.kind) {
        case K::kDeletePosition: {
          sql::Stmt q(db, "DELETE FROM positions WHERE id = ?1");
          S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Int(1, ToSql(f.a)).Exec("repair"));
          break;
        }
        case K::kDeleteEntry: {
          sql::Stmt q(db, "DELETE FROM fs_dirents WHERE cookie = ?1");
          S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Int(1, ToSql(f.a)).Exec("repair"));
          break;
        }
        case K::kCreateLostFound: {
          sql::Stmt q(
              db,
              "INSERT INTO fs_inodes(mode, uid, gid, nlink, size, rdev, atime_ns, mtime_ns, "
              "ctime_ns) VALUES (?1, ?2, ?3, ?4, 0, 0, ?5, ?5, ?5)");
          S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Int(1, S_IFDIR | 0700)
                                     .Int(2, ToSql(f.a))
                                     .Int(3, ToSql(f.b))
                                     .Int(4, ToSql(f.c))
                                     .Int(5, now)
                                     .Exec("repair"));
          lost_found = FromSql(sqlite3_last_insert_rowid(db));
          sql::Stmt e(db, "INSERT INTO fs_dirents(parent, name, ino) VALUES (1, ?1, ?2)");
          S3ORAM_RETURN_IF_ERROR(e.status().WithContext("repair"));
          S3ORAM_RETURN_IF_ERROR(
              e.Blob(1, kLostFoundName).Int(2, ToSql(*lost_found)).Exec("repair"));
          break;
        }
        case K::kLinkLostFound: {
          S3ORAM_RETURN_IF_ERROR(find_lost_found());
          sql::Stmt e(db, "INSERT INTO fs_dirents(parent, name, ino) VALUES (?1, ?2, ?3)");
          S3ORAM_RETURN_IF_ERROR(e.status().WithContext("repair"));
          S3ORAM_RETURN_IF_ERROR(
              e.Int(1, ToSql(*lost_found)).Blob(2, f.name).Int(3, ToSql(f.a)).Exec("repair"));
          sql::Stmt t(db, "UPDATE fs_inodes SET mtime_ns = ?1, ctime_ns = ?1 WHERE ino = ?2");
          S3ORAM_RETURN_IF_ERROR(t.status().WithContext("repair"));
          S3ORAM_RETURN_IF_ERROR(t.Int(1, now).Int(2, ToSql(*lost_found)).Exec("repair"));
          break;
        }
        case K::kSetNlink: {
          sql::Stmt q(db, "UPDATE fs_inodes SET nlink = ?1, ctime_ns = ?2 WHERE ino = ?3");
          S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
          S3ORAM_RETURN_IF_ERROR(
              q.Int(1, ToSql(f.b)).Int(2, now).Int(3, ToSql(f.a)).Exec("repair"));
          break;
        }
        case K::kUnmapBlock: {
          // The id is returned to the free list by a kAddFree of the same
          // plan if it is in the allocated range.
          for (const char* sql : {"DELETE FROM fs_blocks WHERE ino = ?1 AND idx = ?2",
                                  "DELETE FROM fs_lost WHERE ino = ?1 AND idx = ?2"}) {
            sql::Stmt q(db, sql);
            S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
            S3ORAM_RETURN_IF_ERROR(q.Int(1, ToSql(f.a)).Int(2, ToSql(f.b)).Exec("repair"));
          }
          break;
        }
        case K::kSetValid: {
          sql::Stmt q(db, "UPDATE fs_blocks SET valid = ?1 WHERE ino = ?2 AND idx = ?3");
          S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
          S3ORAM_RETURN_IF_ERROR(
              q.Int(1, ToSql(f.c)).Int(2, ToSql(f.a)).Int(3, ToSql(f.b)).Exec("repair"));
          break;
        }
        case K::kClearNext: {
          sql::Stmt q(db,
                      "UPDATE fs_blocks SET next_id = NULL, next_slot = NULL, next_slots = NULL "
                      "WHERE ino = ?1 AND idx = ?2");
          S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Int(1, ToSql(f.a)).Int(2, ToSql(f.b)).Exec("repair"));
          break;
        }
        case K::kRewriteShared:
          S3ORAM_RETURN_IF_ERROR(RewriteShared(db));
          break;
        case K::kAddFree: {
          sql::Stmt q(db, "INSERT OR IGNORE INTO fs_free_blocks(block_id) VALUES (?1)");
          S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Int(1, ToSql(f.a)).Exec("repair"));
          break;
        }
        case K::kRemoveFree: {
          sql::Stmt q(db, "DELETE FROM fs_free_blocks WHERE block_id = ?1");
          S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Int(1, ToSql(f.a)).Exec("repair"));
          break;
        }
        case K::kSetNextUnused: {
          sql::Stmt q(db, "UPDATE fs_meta SET value = ?1 WHERE key = 'next_unused'");
          S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Int(1, ToSql(f.a)).Exec("repair"));
          break;
        }
        case K::kDeleteSymlinkRow: {
          sql::Stmt q(db, "DELETE FROM fs_symlinks WHERE ino = ?1");
          S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Int(1, ToSql(f.a)).Exec("repair"));
          break;
        }
        case K::kClearLost: {
          sql::Stmt q(db, "DELETE FROM fs_lost WHERE ino = ?1 AND idx = ?2");
          S3ORAM_RETURN_IF_ERROR(q.status().WithContext("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Int(1, ToSql(f.a)).Int(2, ToSql(f.b)).Exec("repair"));
          break;
        }
        case K::kDeleteStrayXattrs:
          S3ORAM_RETURN_IF_ERROR(
              sql::Exec(db, "DELETE FROM fs_xattrs WHERE ino NOT IN (SELECT ino FROM fs_inodes)"));
          break;
      }
    }
    // A lost mark belongs to a mapped block (metadata_schema.h): one whose
    // mapping a repair removed, or whose inode is gone, is dropped with it.
    S3ORAM_RETURN_IF_ERROR(sql::Exec(
        db, "DELETE FROM fs_lost WHERE NOT EXISTS (SELECT 1 FROM fs_blocks b WHERE "
            "b.ino = fs_lost.ino AND b.idx = fs_lost.idx)"));
    return sql::Exec(db, "COMMIT");
  };
  Status s = apply();
  if (!s.ok()) {
    if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return s.WithContext(state_path + ": repairs (nothing changed)");
  }
  return Status::Ok();
}

}  // namespace s3oram::fs

// Fsck: the snapshot every check reads (fsck.h, FsckSnapshot::Load), and
// the small report helpers. The phases and the invariants they check are
// described in docs/ARCHITECTURE.md §10 (fsck).
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

std::uint64_t FsckPhaseResult::unrepairable() const {
  return static_cast<std::uint64_t>(std::count_if(
      problems.begin(), problems.end(), [](const FsckProblem& p) { return !p.repairable; }));
}

std::string FsckPathOf(const FsckSnapshot& snap, Ino ino) { return PathNamer(snap).Path(ino); }

// --- loading ------------------------------------------------------------------

namespace {

// Each step reads some tables into the snapshot, inside Load's one read
// transaction. Its errors say which table; Load adds the state's path.

// The ORAM parameters, counters, pending operations and positions.
Status ReadOramTables(sqlite3* db, FsckSnapshot& s) {
  Status err;
  {
    sql::Stmt q(db, "SELECT key, value FROM meta");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("reading meta"));
    while (q.Next(&err)) {
      const std::string key = q.ColumnBytes(0);
      const std::uint64_t v = q.ColumnU64(1);
      if (key == "height") s.params.height = static_cast<std::uint32_t>(v);
      if (key == "bucket_size") s.params.bucket_size = static_cast<std::uint32_t>(v);
      if (key == "evict_rate") s.params.evict_rate = static_cast<std::uint32_t>(v);
      if (key == "block_bytes") s.params.block_bytes = static_cast<std::uint32_t>(v);
      if (key == "capacity_blocks") s.params.capacity_blocks = v;
      if (key == "parties") s.params.parties = static_cast<std::uint32_t>(v);
      if (key == "threshold") s.params.threshold = static_cast<std::uint32_t>(v);
      if (key == "mac_elems") s.params.mac_elems = static_cast<std::uint32_t>(v);
    }
    S3ORAM_RETURN_IF_ERROR(err);
  }
  if (s.params.height < 1 || s.params.height > 62 || s.params.bucket_size == 0 ||
      s.params.block_bytes == 0 || s.params.mac_elems > 16) {
    return Status::Corruption("stored ORAM parameters are invalid");
  }
  {
    sql::Stmt q(db, "SELECT nr, ne, seq, epoch FROM counters");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("reading counters"));
    if (!q.Next(&err)) return err.ok() ? Status::Corruption("counters row missing") : err;
    s.counters = Counters{q.ColumnU64(0), q.ColumnU64(1), q.ColumnU64(2), q.ColumnU64(3)};
  }
  {
    sql::Stmt q(db, "SELECT seq, kind, payload FROM pending ORDER BY seq");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("reading pending operations"));
    while (q.Next(&err)) {
      const std::string payload = q.ColumnBytes(2);
      s.pending.push_back(
          FsckSnapshot::Pending{q.ColumnU64(0), q.ColumnBytes(1),
                                std::vector<std::uint8_t>(payload.begin(), payload.end())});
    }
    S3ORAM_RETURN_IF_ERROR(err);
  }
  {
    sql::Stmt q(db, "SELECT id, leaf, level, slot, version FROM positions ORDER BY id");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("reading positions"));
    while (q.Next(&err)) {
      s.positions.push_back(FsckSnapshot::PositionRow{
          q.ColumnU64(0), q.ColumnInt(1), q.ColumnInt(2), q.ColumnInt(3), q.ColumnU64(4)});
    }
    S3ORAM_RETURN_IF_ERROR(err);
  }
  return Status::Ok();
}

// The filesystem's own settings, inodes and directory entries.
Status ReadFsTables(sqlite3* db, FsckSnapshot& s) {
  Status err;
  {
    sql::Stmt q(db, "SELECT key, value FROM fs_meta");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("reading fs_meta"));
    while (q.Next(&err)) {
      const std::string key = q.ColumnBytes(0);
      if (key == "next_unused" && q.ColumnType(1) == SQLITE_INTEGER) s.next_unused = q.ColumnU64(1);
      if (key == "capacity_blocks") s.fs_capacity_blocks = q.ColumnU64(1);
      if (key == "block_bytes") s.fs_block_bytes = q.ColumnU64(1);
      if (key == "schema_version") s.fs_schema_version = q.ColumnInt(1);
      if (key == "slots_per_block") s.slots_per_block = q.ColumnInt(1);
    }
    S3ORAM_RETURN_IF_ERROR(err);
  }
  {
    sql::Stmt q(db, "SELECT ino, mode, nlink, size, uid, gid FROM fs_inodes ORDER BY ino");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("reading fs_inodes"));
    while (q.Next(&err)) {
      s.inodes[q.ColumnU64(0)] = FsckSnapshot::Inode{
          static_cast<std::uint32_t>(q.ColumnInt(1)), q.ColumnInt(2), q.ColumnU64(3),
          static_cast<std::uint32_t>(q.ColumnInt(4)), static_cast<std::uint32_t>(q.ColumnInt(5))};
    }
    S3ORAM_RETURN_IF_ERROR(err);
  }
  {
    sql::Stmt q(db, "SELECT cookie, parent, name, ino FROM fs_dirents ORDER BY cookie");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("reading fs_dirents"));
    while (q.Next(&err))
      s.dirents.push_back(
          FsckSnapshot::Dirent{q.ColumnU64(0), q.ColumnU64(1), q.ColumnBytes(2), q.ColumnU64(3)});
    S3ORAM_RETURN_IF_ERROR(err);
  }
  return Status::Ok();
}

// The block map. Schema 2 had whole blocks only (the daemon migrates it at
// its next mount): its rows read as whole extents without a relocation
// target. fs_lost exists once a daemon of this version opened the state.
Status ReadBlocks(sqlite3* db, FsckSnapshot& s) {
  Status err;
  bool has_lost = false;
  {
    sql::Stmt t(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'fs_lost'");
    S3ORAM_RETURN_IF_ERROR(t.status().WithContext("reading the schema"));
    has_lost = t.Next(&err);
    S3ORAM_RETURN_IF_ERROR(err);
  }
  const char* sql =
      s.fs_schema_version < 3 ? "SELECT ino, idx, block_id, valid, 0, 0, NULL, NULL, NULL, 0 "
                                "FROM fs_blocks ORDER BY ino, idx"
      : has_lost
          ? "SELECT ino, idx, block_id, valid, slot, slots, next_id, next_slot, next_slots, "
            "EXISTS(SELECT 1 FROM fs_lost l WHERE l.ino = b.ino AND l.idx = b.idx) "
            "FROM fs_blocks b ORDER BY ino, idx"
          : "SELECT ino, idx, block_id, valid, slot, slots, next_id, next_slot, next_slots, 0 "
            "FROM fs_blocks ORDER BY ino, idx";
  sql::Stmt q(db, sql);
  S3ORAM_RETURN_IF_ERROR(q.status().WithContext("reading fs_blocks"));
  while (q.Next(&err)) {
    FsckSnapshot::Block b;
    b.ino = q.ColumnU64(0);
    b.idx = q.ColumnU64(1);
    b.id = q.ColumnU64(2);
    b.valid = q.ColumnInt(3);
    b.slot = static_cast<std::uint32_t>(q.ColumnInt(4));
    b.slots = static_cast<std::uint32_t>(q.ColumnInt(5));
    if (q.ColumnType(6) != SQLITE_NULL) {
      b.next = Extent{q.ColumnU64(6), static_cast<std::uint32_t>(q.ColumnInt(7)),
                      static_cast<std::uint32_t>(q.ColumnInt(8))};
    }
    b.lost = q.ColumnInt(9) != 0;
    s.blocks.push_back(b);
  }
  return err;
}

// Shared blocks, free blocks, symlink targets, and the count of extended
// attributes left behind by removed inodes.
Status ReadBlockLists(sqlite3* db, FsckSnapshot& s) {
  Status err;
  if (s.fs_schema_version >= 3) {
    sql::Stmt sh(db, "SELECT block_id, used, nused, longest FROM fs_shared ORDER BY block_id");
    S3ORAM_RETURN_IF_ERROR(sh.status().WithContext("reading fs_shared"));
    while (sh.Next(&err))
      s.shared.push_back(
          FsckSnapshot::Shared{sh.ColumnU64(0), sh.ColumnU64(1), sh.ColumnInt(2), sh.ColumnInt(3)});
    S3ORAM_RETURN_IF_ERROR(err);
  }
  {
    sql::Stmt q(db, "SELECT block_id FROM fs_free_blocks ORDER BY block_id");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("reading fs_free_blocks"));
    while (q.Next(&err)) s.free_blocks.push_back(q.ColumnU64(0));
    S3ORAM_RETURN_IF_ERROR(err);
  }
  {
    sql::Stmt q(db, "SELECT ino FROM fs_symlinks ORDER BY ino");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("reading fs_symlinks"));
    while (q.Next(&err)) s.symlink_rows.push_back(q.ColumnU64(0));
    S3ORAM_RETURN_IF_ERROR(err);
  }
  {
    sql::Stmt q(db, "SELECT count(*) FROM fs_xattrs WHERE ino NOT IN (SELECT ino FROM fs_inodes)");
    S3ORAM_RETURN_IF_ERROR(q.status().WithContext("reading fs_xattrs"));
    if (q.Next(&err)) s.xattr_rows_of_missing_inodes = q.ColumnU64(0);
    S3ORAM_RETURN_IF_ERROR(err);
  }
  return Status::Ok();
}

}  // namespace

Result<FsckSnapshot> FsckSnapshot::Load(UnlockedState& state) {
  const std::string& state_path = state.path();
  S3ORAM_ASSIGN_OR_RETURN(sqlite3 * db, state.OpenDatabase(/*read_only=*/true));
  struct Closer {
    sqlite3* db;
    ~Closer() { sqlite3_close_v2(db); }
  } closer{db};
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  // One read transaction: every row below comes from the same commit.
  S3ORAM_RETURN_IF_ERROR(sql::Exec(db, "BEGIN").WithContext(state_path));
  FsckSnapshot s;
  s.params.mac_elems = 0;  // a state made before share MACs has no mac_elems row
  S3ORAM_RETURN_IF_ERROR(ReadOramTables(db, s).WithContext(state_path));
  {
    Result<bool> has_fs = sql::TableExists(db, "fs_meta");
    if (!has_fs.ok()) return has_fs.status().WithContext(state_path);
    s.has_fs = *has_fs;
  }
  if (!s.has_fs) return s;
  S3ORAM_RETURN_IF_ERROR(ReadFsTables(db, s).WithContext(state_path));
  S3ORAM_RETURN_IF_ERROR(ReadBlocks(db, s).WithContext(state_path));
  S3ORAM_RETURN_IF_ERROR(ReadBlockLists(db, s).WithContext(state_path));
  (void)sql::Exec(db, "COMMIT");
  return s;
}

}  // namespace s3oram::fs

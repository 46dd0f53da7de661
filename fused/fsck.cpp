// Fsck (see fsck.h). The phases and the invariants they check are described
// in docs/ARCHITECTURE.md §10 (fsck).
#include "fused/fsck.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace s3oram::fs {
namespace {

constexpr int kBusyTimeoutMs = 5000;
// A ghost inode number for a /lost+found that the repairs will create (real
// numbers come from AUTOINCREMENT and never reach this).
constexpr Ino kNewLostFound = ~Ino{0};
// Problems of one kind that can be numerous (leaked ids) are reported one by
// one up to this many, then summarised.
constexpr std::size_t kListLimit = 20;

std::uint64_t FromSql(std::int64_t v) { return std::bit_cast<std::uint64_t>(v); }
std::int64_t ToSql(std::uint64_t v) { return std::bit_cast<std::int64_t>(v); }
bool IsDir(std::uint32_t mode) { return (mode & S_IFMT) == S_IFDIR; }
bool IsReg(std::uint32_t mode) { return (mode & S_IFMT) == S_IFREG; }
bool IsLnk(std::uint32_t mode) { return (mode & S_IFMT) == S_IFLNK; }

// A prepared statement for one query of Load/Apply.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &st_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Status ok(const char* what) const {
    if (rc_ == SQLITE_OK) return Status::Ok();
    return Status::Corruption(std::string(what) + ": " + sqlite3_errmsg(db_));
  }
  Stmt& Bind(int i, std::int64_t v) {
    sqlite3_bind_int64(st_, i, v);
    return *this;
  }
  Stmt& BindBlob(int i, const std::string& s) {
    sqlite3_bind_blob64(st_, i, s.data(), s.size(), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& BindText(int i, const char* s) {
    sqlite3_bind_text(st_, i, s, -1, SQLITE_TRANSIENT);
    return *this;
  }
  // true: a row; false: done; error status in *err.
  bool Next(Status* err) {
    const int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) *err = Status::IoError(std::string("sqlite: ") + sqlite3_errmsg(db_));
    return false;
  }
  Status Run() {
    Status err;
    while (Next(&err)) {
    }
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
    return err;
  }
  std::int64_t Col(int c) const { return sqlite3_column_int64(st_, c); }
  std::uint64_t UCol(int c) const { return FromSql(Col(c)); }
  int Type(int c) const { return sqlite3_column_type(st_, c); }
  std::string Blob(int c) const {
    const void* p = sqlite3_column_blob(st_, c);
    const int n = sqlite3_column_bytes(st_, c);
    return p ? std::string(static_cast<const char*>(p), static_cast<std::size_t>(n))
             : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
  int rc_ = SQLITE_OK;
};

Status ExecSql(sqlite3* db, const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string msg = std::string(sql) + ": " + (err ? err : sqlite3_errstr(rc));
  sqlite3_free(err);
  if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED) return Status::Unavailable(msg);
  return Status::IoError(msg);
}

bool TableExists(sqlite3* db, const char* name) {
  Stmt q(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1");
  if (!q.ok("").ok()) return false;
  q.BindText(1, name);
  Status err;
  return q.Next(&err);
}

std::string TypeName(std::uint32_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "file";
    case S_IFDIR:
      return "directory";
    case S_IFLNK:
      return "symlink";
    case S_IFIFO:
      return "fifo";
    case S_IFSOCK:
      return "socket";
    case S_IFCHR:
      return "character device";
    case S_IFBLK:
      return "block device";
    default:
      return "inode of unknown type";
  }
}

// Names inodes by a path through their first entry (by cookie), computed once
// from the snapshot as loaded.
class PathNamer {
 public:
  explicit PathNamer(const FsckSnapshot& snap) {
    for (const auto& d : snap.dirents) parent_.try_emplace(d.ino, d.parent, d.name);
  }
  std::string Path(Ino ino) const {
    if (ino == kRootIno) return "/";
    std::string path;
    std::unordered_set<Ino> seen;
    Ino cur = ino;
    while (cur != kRootIno) {
      auto it = parent_.find(cur);
      if (it == parent_.end() || !seen.insert(cur).second) {
        return "#" + std::to_string(ino) + " (unreachable)";
      }
      path = "/" + it->second.second + path;
      cur = it->second.first;
    }
    return path;
  }
  // "inode 12 (/a/b)".
  std::string Describe(Ino ino) const {
    return "inode " + std::to_string(ino) + " (" + Path(ino) + ")";
  }

 private:
  std::unordered_map<Ino, std::pair<Ino, std::string>> parent_;
};

// Where each block id is mapped, for naming damaged blocks.
std::string BlockOwner(const FsckSnapshot& snap, const PathNamer& names,
                       const FsckSnapshot::Block& b) {
  const std::uint64_t bb = snap.params.block_bytes;
  std::string where = "ORAM block " + std::to_string(b.id);
  if (b.slots != 0) {
    where += " slots " + std::to_string(b.slot) + ".." + std::to_string(b.slot + b.slots - 1);
  }
  return names.Describe(b.ino) + " block " + std::to_string(b.idx) + " (bytes " +
         std::to_string(b.idx * bb) + ".." + std::to_string(b.idx * bb + bb - 1) + ", " + where +
         ")";
}

std::uint64_t BlocksFor(std::uint64_t size, std::uint64_t block_bytes) {
  return size / block_bytes + (size % block_bytes != 0 ? 1 : 0);
}

std::string IdList(const std::vector<BlockId>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size() && i < kListLimit; ++i) {
    out += (i ? ", " : "") + std::to_string(ids[i]);
  }
  if (ids.size() > kListLimit)
    out += ", ... (" + std::to_string(ids.size() - kListLimit) + " more)";
  return out;
}

}  // namespace

std::uint64_t FsckPhaseResult::unrepairable() const {
  return static_cast<std::uint64_t>(std::count_if(
      problems.begin(), problems.end(), [](const FsckProblem& p) { return !p.repairable; }));
}

std::string FsckPathOf(const FsckSnapshot& snap, Ino ino) { return PathNamer(snap).Path(ino); }

// --- loading ------------------------------------------------------------------

Result<FsckSnapshot> FsckSnapshot::Load(UnlockedState& state) {
  const std::string& state_path = state.path();
  S3ORAM_ASSIGN_OR_RETURN(sqlite3 * db, state.OpenDatabase(/*read_only=*/true));
  struct Closer {
    sqlite3* db;
    ~Closer() { sqlite3_close_v2(db); }
  } closer{db};
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  // One read transaction: every row below comes from the same commit.
  S3ORAM_RETURN_IF_ERROR(ExecSql(db, "BEGIN").WithContext(state_path));
  FsckSnapshot s;
  Status err;
  auto fail = [&](Status e) { return e.WithContext(state_path); };
  {
    Stmt q(db, "SELECT key, value FROM meta");
    S3ORAM_RETURN_IF_ERROR(fail(q.ok("reading meta")));
    while (q.Next(&err)) {
      const std::string key = q.Blob(0);
      const std::uint64_t v = q.UCol(1);
      if (key == "height") s.params.height = static_cast<std::uint32_t>(v);
      if (key == "bucket_size") s.params.bucket_size = static_cast<std::uint32_t>(v);
      if (key == "evict_rate") s.params.evict_rate = static_cast<std::uint32_t>(v);
      if (key == "block_bytes") s.params.block_bytes = static_cast<std::uint32_t>(v);
      if (key == "capacity_blocks") s.params.capacity_blocks = v;
      if (key == "parties") s.params.parties = static_cast<std::uint32_t>(v);
      if (key == "threshold") s.params.threshold = static_cast<std::uint32_t>(v);
    }
    S3ORAM_RETURN_IF_ERROR(fail(err));
  }
  if (s.params.height < 1 || s.params.height > 62 || s.params.bucket_size == 0 ||
      s.params.block_bytes == 0) {
    return fail(Status::Corruption("stored ORAM parameters are invalid"));
  }
  {
    Stmt q(db, "SELECT nr, ne, seq, epoch FROM counters");
    S3ORAM_RETURN_IF_ERROR(fail(q.ok("reading counters")));
    if (!q.Next(&err)) return fail(err.ok() ? Status::Corruption("counters row missing") : err);
    s.counters = Counters{q.UCol(0), q.UCol(1), q.UCol(2), q.UCol(3)};
  }
  {
    Stmt q(db, "SELECT seq, kind, payload FROM pending ORDER BY seq");
    S3ORAM_RETURN_IF_ERROR(fail(q.ok("reading pending operations")));
    while (q.Next(&err)) {
      const std::string payload = q.Blob(2);
      s.pending.push_back(
          Pending{q.UCol(0), q.Blob(1), std::vector<std::uint8_t>(payload.begin(), payload.end())});
    }
    S3ORAM_RETURN_IF_ERROR(fail(err));
  }
  {
    Stmt q(db, "SELECT id, leaf, level, slot, version FROM positions ORDER BY id");
    S3ORAM_RETURN_IF_ERROR(fail(q.ok("reading positions")));
    while (q.Next(&err)) {
      s.positions.push_back(PositionRow{q.UCol(0), q.Col(1), q.Col(2), q.Col(3), q.UCol(4)});
    }
    S3ORAM_RETURN_IF_ERROR(fail(err));
  }
  s.has_fs = TableExists(db, "fs_meta");
  if (!s.has_fs) return s;
  {
    Stmt q(db, "SELECT key, value FROM fs_meta");
    S3ORAM_RETURN_IF_ERROR(fail(q.ok("reading fs_meta")));
    while (q.Next(&err)) {
      const std::string key = q.Blob(0);
      if (key == "next_unused" && q.Type(1) == SQLITE_INTEGER) s.next_unused = q.UCol(1);
      if (key == "capacity_blocks") s.fs_capacity_blocks = q.UCol(1);
      if (key == "block_bytes") s.fs_block_bytes = q.UCol(1);
      if (key == "schema_version") s.fs_schema_version = q.Col(1);
      if (key == "slots_per_block") s.slots_per_block = q.Col(1);
    }
    S3ORAM_RETURN_IF_ERROR(fail(err));
  }
  {
    Stmt q(db, "SELECT ino, mode, nlink, size, uid, gid FROM fs_inodes ORDER BY ino");
    S3ORAM_RETURN_IF_ERROR(fail(q.ok("reading fs_inodes")));
    while (q.Next(&err)) {
      s.inodes[q.UCol(0)] =
          Inode{static_cast<std::uint32_t>(q.Col(1)), q.Col(2), q.UCol(3),
                static_cast<std::uint32_t>(q.Col(4)), static_cast<std::uint32_t>(q.Col(5))};
    }
    S3ORAM_RETURN_IF_ERROR(fail(err));
  }
  {
    Stmt q(db, "SELECT cookie, parent, name, ino FROM fs_dirents ORDER BY cookie");
    S3ORAM_RETURN_IF_ERROR(fail(q.ok("reading fs_dirents")));
    while (q.Next(&err)) s.dirents.push_back(Dirent{q.UCol(0), q.UCol(1), q.Blob(2), q.UCol(3)});
    S3ORAM_RETURN_IF_ERROR(fail(err));
  }
  {
    // Schema 2 had whole blocks only (the daemon migrates it at its next
    // mount): its rows read as whole extents without a relocation target.
    const char* sql =
        s.fs_schema_version < 3
            ? "SELECT ino, idx, block_id, valid, 0, 0, NULL, NULL, NULL "
              "FROM fs_blocks ORDER BY ino, idx"
            : "SELECT ino, idx, block_id, valid, slot, slots, next_id, next_slot, next_slots "
              "FROM fs_blocks ORDER BY ino, idx";
    Stmt q(db, sql);
    S3ORAM_RETURN_IF_ERROR(fail(q.ok("reading fs_blocks")));
    while (q.Next(&err)) {
      Block b;
      b.ino = q.UCol(0);
      b.idx = q.UCol(1);
      b.id = q.UCol(2);
      b.valid = q.Col(3);
      b.slot = static_cast<std::uint32_t>(q.Col(4));
      b.slots = static_cast<std::uint32_t>(q.Col(5));
      if (q.Type(6) != SQLITE_NULL) {
        b.next = Extent{q.UCol(6), static_cast<std::uint32_t>(q.Col(7)),
                        static_cast<std::uint32_t>(q.Col(8))};
      }
      s.blocks.push_back(b);
    }
    S3ORAM_RETURN_IF_ERROR(fail(err));
  }
  if (s.fs_schema_version >= 3) {
    Stmt sh(db, "SELECT block_id, used, nused, longest FROM fs_shared ORDER BY block_id");
    S3ORAM_RETURN_IF_ERROR(fail(sh.ok("reading fs_shared")));
    while (sh.Next(&err)) s.shared.push_back(Shared{sh.UCol(0), sh.UCol(1), sh.Col(2), sh.Col(3)});
    S3ORAM_RETURN_IF_ERROR(fail(err));
  }
  {
    Stmt q(db, "SELECT block_id FROM fs_free_blocks ORDER BY block_id");
    S3ORAM_RETURN_IF_ERROR(fail(q.ok("reading fs_free_blocks")));
    while (q.Next(&err)) s.free_blocks.push_back(q.UCol(0));
    S3ORAM_RETURN_IF_ERROR(fail(err));
  }
  {
    Stmt q(db, "SELECT ino FROM fs_symlinks ORDER BY ino");
    S3ORAM_RETURN_IF_ERROR(fail(q.ok("reading fs_symlinks")));
    while (q.Next(&err)) s.symlink_rows.push_back(q.UCol(0));
    S3ORAM_RETURN_IF_ERROR(fail(err));
  }
  {
    Stmt q(db, "SELECT count(*) FROM fs_xattrs WHERE ino NOT IN (SELECT ino FROM fs_inodes)");
    S3ORAM_RETURN_IF_ERROR(fail(q.ok("reading fs_xattrs")));
    if (q.Next(&err)) s.xattr_rows_of_missing_inodes = q.UCol(0);
    S3ORAM_RETURN_IF_ERROR(fail(err));
  }
  (void)ExecSql(db, "COMMIT");
  return s;
}

// --- phase 1: the ORAM state ----------------------------------------------------

FsckPhaseResult CheckOram(const FsckSnapshot& snap, const FsckOptions& options) {
  FsckPhaseResult r;
  const OramParams& p = snap.params;
  const TreeGeometry geo = p.geometry();
  const PathNamer names(snap);
  // Blocks holding file data: losing their position loses data, so their
  // rows are deleted only with zero_damaged. Other rows (free, never written)
  // can go: nothing reads them.
  std::unordered_map<BlockId, const FsckSnapshot::Block*> written;
  for (const auto& b : snap.blocks) {
    if (b.valid > 0) written[b.id] = &b;
  }
  auto owner = [&](BlockId id) -> std::string {
    auto it = written.find(id);
    if (it == written.end()) return "block " + std::to_string(id) + " (holds no file data)";
    return BlockOwner(snap, names, *it->second);
  };
  auto drop = [&](BlockId id, std::string message, std::set<BlockId>& deleted) {
    const bool can = written.count(id) == 0 || options.zero_damaged;
    if (can && deleted.insert(id).second) {
      r.repairs.push_back({FsckRepair::Kind::kDeletePosition, id});
    }
    if (!can) message += "; its data cannot be recovered (--zero-damaged drops it)";
    r.problems.push_back({1, std::move(message), can});
  };
  std::set<BlockId> deleted;
  std::map<std::pair<BucketId, std::uint32_t>, std::vector<BlockId>> occupants;
  bool range_problem = false;
  for (const auto& row : snap.positions) {
    std::string why;
    if (row.id >= p.capacity_blocks) {
      why = "block id >= capacity " + std::to_string(p.capacity_blocks);
    } else if (row.leaf < 0 || !geo.is_leaf(static_cast<LeafId>(row.leaf))) {
      why = "leaf " + std::to_string(row.leaf) + " is not a leaf of a tree of height " +
            std::to_string(p.height) + " (leaves " + std::to_string(geo.first_leaf()) + ".." +
            std::to_string((geo.first_leaf() << 1) - 1) + ")";
    } else if (row.level < 0 || row.level > std::int64_t{p.height}) {
      why = "level " + std::to_string(row.level) + " outside 0.." + std::to_string(p.height);
    } else if (row.slot < 0 || row.slot >= std::int64_t{p.bucket_size}) {
      why = "slot " + std::to_string(row.slot) + " outside 0.." + std::to_string(p.bucket_size - 1);
    }
    if (!why.empty()) {
      range_problem = true;
      drop(row.id, "position of " + owner(row.id) + " is outside the tree: " + why, deleted);
      continue;
    }
    // (leaf, level) names the bucket on the path to leaf at that level, so a
    // row in range is on its path by construction.
    const auto level = static_cast<std::uint32_t>(row.level);
    const auto slot = static_cast<std::uint32_t>(row.slot);
    occupants[{geo.BucketOnPath(static_cast<LeafId>(row.leaf), level), slot}].push_back(row.id);
    if (level == 0 && slot >= snap.counters.nr) {
      // Root slots >= nr are rewritten by the next accesses: an entry there is stale.
      drop(row.id,
           "position of " + owner(row.id) + " is root slot " + std::to_string(slot) +
               ", but only slots below nr = " + std::to_string(snap.counters.nr) +
               " hold blocks since the last eviction",
           deleted);
    }
  }
  bool collision = false;
  for (const auto& [where, ids] : occupants) {
    if (ids.size() < 2) continue;
    collision = true;
    std::string list;
    for (BlockId id : ids) list += (list.empty() ? "" : ", ") + owner(id);
    std::vector<BlockId> holders;
    for (BlockId id : ids) {
      if (written.count(id) == 0) {
        if (deleted.insert(id).second) r.repairs.push_back({FsckRepair::Kind::kDeletePosition, id});
      } else {
        holders.push_back(id);
      }
    }
    std::string message = "bucket " + std::to_string(where.first) + " slot " +
                          std::to_string(where.second) + " is claimed by " +
                          std::to_string(ids.size()) + " blocks: " + list;
    bool fixed = holders.size() <= 1;
    if (!fixed && options.zero_damaged) {
      // At most one of them is really there and the map cannot tell which.
      for (BlockId id : holders) {
        if (deleted.insert(id).second) r.repairs.push_back({FsckRepair::Kind::kDeletePosition, id});
      }
      fixed = true;
    }
    if (!fixed) {
      message += "; the data of at most one can be recovered (--zero-damaged drops them)";
    }
    r.problems.push_back({1, std::move(message), fixed});
  }
  // What ClientStateStore::LoadPositionMap refuses (so OramClient::Open fails).
  r.position_map_loadable = !range_problem && !collision;

  // The tree's capacity bounds the live blocks (the overflow bound assumes
  // N <= A * 2^(H-1)); Open refuses parameters beyond it as well.
  if (p.evict_rate == 0 || p.capacity_blocks > p.max_capacity_blocks()) {
    r.problems.push_back({1,
                          "capacity " + std::to_string(p.capacity_blocks) +
                              " blocks exceeds what the tree holds (A * 2^(H-1) = " +
                              std::to_string(p.max_capacity_blocks()) + ")",
                          false});
  }
  const Counters& c = snap.counters;
  if (c.nr > p.evict_rate) {
    r.problems.push_back({1,
                          "counter nr = " + std::to_string(c.nr) +
                              " exceeds the eviction rate A = " + std::to_string(p.evict_rate),
                          false});
  }
  if (c.epoch == 0 || c.seq == 0) {
    r.problems.push_back(
        {1, "counters epoch/seq are zero: the state was never initialised", false});
  }
  for (const auto& op : snap.pending) {
    if (op.kind == "evict" && op.payload.size() == 12) {
      std::uint64_t ne = 0;
      for (int i = 0; i < 8; ++i)
        ne |= std::uint64_t{op.payload[static_cast<std::size_t>(i)]} << (8 * i);
      if (ne == c.ne) {
        r.notes.push_back(
            "eviction " + std::to_string(ne) +
            " is pending (interrupted by a crash); opening the filesystem finishes it");
        continue;
      }
      r.problems.push_back({1,
                            "stray pending eviction " + std::to_string(ne) +
                                " does not match the eviction counter ne = " + std::to_string(c.ne),
                            false});
      continue;
    }
    if (op.kind == kPendingRootKind && op.seq == kPendingRootKey &&
        op.payload.size() == PendingRootPayloadBytes(p.elems_per_slot())) {
      std::uint64_t slot = 0;
      for (int i = 0; i < 4; ++i)
        slot |= std::uint64_t{op.payload[static_cast<std::size_t>(i)]} << (8 * i);
      if (slot == c.nr && slot < p.evict_rate) {
        r.notes.push_back("the last access's root write (root slot " + std::to_string(slot) +
                          ") is pending; opening the filesystem sends it");
        continue;
      }
      r.problems.push_back({1,
                            "stray pending root write for slot " + std::to_string(slot) +
                                " does not match the next root slot nr = " + std::to_string(c.nr),
                            false});
      continue;
    }
    r.problems.push_back(
        {1, "stray pending operation seq " + std::to_string(op.seq) + " of kind '" + op.kind + "'",
         false});
  }
  return r;
}

// --- phase 2: the filesystem metadata ---------------------------------------------

FsckPhaseResult CheckMetadata(const FsckSnapshot& snap, const FsckOptions& options,
                              const std::set<BlockId>& positions_deleted_by_phase1) {
  FsckPhaseResult r;
  if (!snap.has_fs) {
    r.notes.push_back("no filesystem metadata (never mounted): only the ORAM state was checked");
    return r;
  }
  const PathNamer names(snap);
  const std::uint64_t bb = snap.params.block_bytes;
  const std::uint64_t cap = snap.params.capacity_blocks;
  auto problem = [&](std::string m, bool repairable) {
    r.problems.push_back({2, std::move(m), repairable});
  };

  if (snap.fs_capacity_blocks != cap || snap.fs_block_bytes != bb) {
    problem("fs_meta records capacity " + std::to_string(snap.fs_capacity_blocks) + " blocks of " +
                std::to_string(snap.fs_block_bytes) + " bytes, the ORAM has " +
                std::to_string(cap) + " of " + std::to_string(bb),
            false);
  }
  auto root = snap.inodes.find(kRootIno);
  if (root == snap.inodes.end() || !IsDir(root->second.mode)) {
    problem("the root directory (inode 1) is missing or not a directory", false);
    return r;
  }

  // Working model of the tree: live entries by cookie, inodes by number.
  std::map<std::uint64_t, FsckSnapshot::Dirent> live;
  for (const auto& d : snap.dirents) live[d.cookie] = d;
  std::map<Ino, FsckSnapshot::Inode> inodes = snap.inodes;
  auto delete_entry = [&](std::uint64_t cookie) {
    live.erase(cookie);
    r.repairs.push_back({FsckRepair::Kind::kDeleteEntry, cookie});
  };

  // Entries: existing directory parent, existing target, valid name.
  for (const auto& d : snap.dirents) {
    const std::string where = "entry '" + d.name + "' (cookie " + std::to_string(d.cookie) + ")";
    auto p = inodes.find(d.parent);
    auto c = inodes.find(d.ino);
    if (p == inodes.end() || !IsDir(p->second.mode)) {
      problem(where + " lies in " + (p == inodes.end() ? "missing inode " : "non-directory ") +
                  std::to_string(d.parent),
              true);
      delete_entry(d.cookie);
    } else if (c == inodes.end()) {
      problem("dangling " + where + " in " + names.Describe(d.parent) +
                  " points to missing inode " + std::to_string(d.ino),
              true);
      delete_entry(d.cookie);
    } else if (d.ino == kRootIno) {
      problem(where + " in " + names.Describe(d.parent) + " points to the root directory", true);
      delete_entry(d.cookie);
    } else if (d.name.empty() || d.name.size() > kMaxNameBytes || d.name == "." || d.name == ".." ||
               d.name.find('/') != std::string::npos || d.name.find('\0') != std::string::npos) {
      problem("invalid name in entry (cookie " + std::to_string(d.cookie) + ") of " +
                  names.Describe(d.parent) + " for inode " + std::to_string(d.ino),
              true);
      delete_entry(d.cookie);
    }
  }
  // A directory has exactly one entry: keep the oldest.
  {
    std::map<Ino, int> dir_entries;
    for (auto it = live.begin(); it != live.end();) {
      const auto& d = it->second;
      if (IsDir(inodes[d.ino].mode) && ++dir_entries[d.ino] > 1) {
        problem("directory " + names.Describe(d.ino) + " has a second entry '" + d.name + "' in " +
                    names.Describe(d.parent),
                true);
        r.repairs.push_back({FsckRepair::Kind::kDeleteEntry, it->first});
        it = live.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Reachability from the root.
  std::map<Ino, std::vector<std::uint64_t>> children;    // parent -> cookies
  std::map<Ino, std::vector<std::uint64_t>> entries_of;  // ino -> cookies
  auto index = [&] {
    children.clear();
    entries_of.clear();
    for (const auto& [cookie, d] : live) {
      children[d.parent].push_back(cookie);
      entries_of[d.ino].push_back(cookie);
    }
  };
  index();
  std::set<Ino> reached;
  auto reach_from = [&](Ino start) {
    std::deque<Ino> todo{start};
    reached.insert(start);
    while (!todo.empty()) {
      const Ino cur = todo.front();
      todo.pop_front();
      for (std::uint64_t cookie : children[cur]) {
        const Ino child = live[cookie].ino;
        if (reached.insert(child).second) todo.push_back(child);
      }
    }
  };
  reach_from(kRootIno);

  // /lost+found: an existing directory entry in the root, or one to create.
  std::optional<Ino> lost_found;
  bool lost_found_blocked = false;
  auto get_lost_found = [&]() -> std::optional<Ino> {
    if (lost_found || lost_found_blocked) return lost_found;
    for (std::uint64_t cookie : children[kRootIno]) {
      const auto& d = live[cookie];
      if (d.name != kLostFoundName) continue;
      if (IsDir(inodes[d.ino].mode)) {
        lost_found = d.ino;
      } else {
        lost_found_blocked = true;
      }
      return lost_found;
    }
    lost_found = kNewLostFound;
    inodes[kNewLostFound] =
        FsckSnapshot::Inode{S_IFDIR | 0700, 2, 0, root->second.uid, root->second.gid};
    const std::uint64_t cookie =
        ~std::uint64_t{0} - 1;  // a model-only cookie, after every real one
    live[cookie] = FsckSnapshot::Dirent{cookie, kRootIno, kLostFoundName, kNewLostFound};
    children[kRootIno].push_back(cookie);
    entries_of[kNewLostFound].push_back(cookie);
    reached.insert(kNewLostFound);
    return lost_found;
  };

  std::uint64_t pending_orphans = 0;
  for (const auto& [ino, node] : snap.inodes) {
    if (reached.count(ino)) continue;
    const bool has_entries = !entries_of[ino].empty();
    const bool has_children = !children[ino].empty();
    if (node.nlink == 0 && !has_entries && !has_children) {
      ++pending_orphans;  // unlinked while open, then a crash: the next mount frees it
      continue;
    }
    // Walk up to the top of the unreachable part: an inode without entries,
    // or the point where the parents loop (a directory cycle, cut there).
    Ino top = ino;
    bool cycle = false;
    std::set<Ino> seen;
    while (!entries_of[top].empty()) {
      if (!seen.insert(top).second) {
        cycle = true;
        break;
      }
      top = live[entries_of[top].front()].parent;
    }
    std::string message = TypeName(node.mode) + " inode " + std::to_string(ino) + " (nlink " +
                          std::to_string(node.nlink) + ", size " + std::to_string(node.size) +
                          ") is not reachable from the root";
    if (top != ino)
      message += " (it hangs below unreachable directory inode " + std::to_string(top) + ")";
    if (cycle) message += "; directory inode " + std::to_string(top) + " is part of a cycle";
    auto lf = get_lost_found();
    if (!lf) {
      problem(message + "; /lost+found exists but is not a directory, so it stays unlinked", false);
      continue;
    }
    if (cycle) {
      for (std::uint64_t cookie : entries_of[top]) delete_entry(cookie);
      index();
    }
    // "#<ino>", or "#<ino>.<n>" if a file of that name is already there.
    std::string name = "#" + std::to_string(top);
    auto taken = [&](const std::string& n) {
      return std::any_of(children[*lf].begin(), children[*lf].end(),
                         [&](std::uint64_t k) { return live[k].name == n; });
    };
    for (int n = 1; taken(name); ++n) name = "#" + std::to_string(top) + "." + std::to_string(n);
    problem(message + ": linked into /lost+found as " + name, true);
    const std::uint64_t cookie = ~std::uint64_t{0} - 2 - top;  // model-only
    live[cookie] = FsckSnapshot::Dirent{cookie, *lf, name, top};
    children[*lf].push_back(cookie);
    entries_of[top].push_back(cookie);
    r.repairs.push_back({FsckRepair::Kind::kLinkLostFound, top, 0, 0, name});
    reach_from(top);
  }
  if (pending_orphans > 0) {
    r.notes.push_back(std::to_string(pending_orphans) +
                      " unlinked inode(s) with nlink 0 await removal (left by a crash; the next "
                      "mount frees them)");
  }

  // Link counts as the stored entries imply them (entries to existing
  // inodes in existing directories): a count that differs from it is an
  // error; one that only differs from the repaired tree's is a consequence
  // of another repair (an entry removed, /lost+found added) and is fixed
  // without a report of its own.
  std::map<Ino, std::int64_t> stored_entries, stored_subdirs;
  for (const auto& d : snap.dirents) {
    auto p = snap.inodes.find(d.parent);
    auto c = snap.inodes.find(d.ino);
    if (p == snap.inodes.end() || !IsDir(p->second.mode) || c == snap.inodes.end()) continue;
    ++stored_entries[d.ino];
    if (IsDir(c->second.mode)) ++stored_subdirs[d.parent];
  }
  // Link counts against the (repaired) entries.
  for (auto& [ino, node] : inodes) {
    const std::uint64_t entries = entries_of[ino].size();
    std::int64_t want;
    if (IsDir(node.mode)) {
      if (ino != kRootIno && entries == 0 && node.nlink == 0 && children[ino].empty()) continue;
      std::uint64_t subdirs = 0;
      for (std::uint64_t cookie : children[ino])
        subdirs += IsDir(inodes[live[cookie].ino].mode) ? 1 : 0;
      want = static_cast<std::int64_t>(2 + subdirs);
    } else {
      want = static_cast<std::int64_t>(entries);
    }
    if (ino == kNewLostFound) {
      node.nlink = want;
      continue;
    }
    const std::int64_t implied = IsDir(node.mode) ? 2 + stored_subdirs[ino] : stored_entries[ino];
    if (node.nlink != want && node.nlink == implied) {
      r.repairs.push_back({FsckRepair::Kind::kSetNlink, ino, static_cast<std::uint64_t>(want)});
    } else if (node.nlink != want) {
      problem(TypeName(node.mode) + " " + names.Describe(ino) + " has nlink " +
                  std::to_string(node.nlink) + ", expected " + std::to_string(want) +
                  (IsDir(node.mode) ? " (2 + subdirectories)" : " (its directory entries)"),
              true);
      r.repairs.push_back({FsckRepair::Kind::kSetNlink, ino, static_cast<std::uint64_t>(want)});
    }
  }
  if (lost_found == kNewLostFound) {
    const auto& lf = inodes[kNewLostFound];
    r.repairs.insert(r.repairs.begin(), {FsckRepair::Kind::kCreateLostFound, lf.uid, lf.gid,
                                         static_cast<std::uint64_t>(lf.nlink)});
  }

  // Symlink targets exactly for symlinks; xattrs only of existing inodes.
  {
    std::set<Ino> rows(snap.symlink_rows.begin(), snap.symlink_rows.end());
    for (Ino ino : snap.symlink_rows) {
      auto it = snap.inodes.find(ino);
      if (it == snap.inodes.end() || !IsLnk(it->second.mode)) {
        problem("symlink target stored for " +
                    std::string(it == snap.inodes.end() ? "missing " : "non-symlink ") + "inode " +
                    std::to_string(ino),
                true);
        r.repairs.push_back({FsckRepair::Kind::kDeleteSymlinkRow, ino});
      }
    }
    for (const auto& [ino, node] : snap.inodes) {
      if (IsLnk(node.mode) && rows.count(ino) == 0) {
        problem("symlink " + names.Describe(ino) + " has no target", false);
      }
    }
  }
  if (snap.xattr_rows_of_missing_inodes > 0) {
    problem(
        std::to_string(snap.xattr_rows_of_missing_inodes) + " xattr(s) belong to missing inodes",
        true);
    r.repairs.push_back({FsckRepair::Kind::kDeleteStrayXattrs});
  }

  // Blocks: the map of every file against sizes, the allocator and the ORAM.
  if (!snap.next_unused) {
    problem("fs_meta has no next_unused: block allocation state is lost", false);
    return r;
  }
  std::uint64_t next = *snap.next_unused;
  if (next > cap) {
    problem("next_unused " + std::to_string(next) + " exceeds the capacity " + std::to_string(cap),
            false);
  }
  std::set<BlockId> positioned;
  for (const auto& row : snap.positions) {
    if (positions_deleted_by_phase1.count(row.id) == 0) positioned.insert(row.id);
  }
  // A state that still has schema 2 is migrated by the daemon at its next
  // mount; its layout is whole blocks. Schema 3 records the slot count.
  const BlockLayout layout(static_cast<std::uint32_t>(bb));
  if (snap.fs_schema_version >= 3 &&
      snap.slots_per_block.value_or(-1) != static_cast<std::int64_t>(layout.slots_per_block())) {
    problem("fs_meta slots_per_block is " +
                (snap.slots_per_block ? std::to_string(*snap.slots_per_block) : "missing") +
                ", not " + std::to_string(layout.slots_per_block()) + " for " +
                std::to_string(bb) + "-byte blocks",
            false);
    return r;
  }
  std::set<BlockId> used;                      // whole or shared
  std::set<BlockId> whole;                     // mapped whole
  std::map<BlockId, std::uint64_t> fragments;  // shared block -> union of its fragments
  std::set<BlockId> unmapped;  // by the repairs above: freed without a report of their own
  std::uint64_t highest_used_plus_one = 0;
  // Claims an extent's space; the reason it cannot, or "".
  auto claim = [&](const Extent& e) -> std::string {
    if (e.id >= cap) return "is out of range (capacity " + std::to_string(cap) + ")";
    if (e.whole()) {
      if (whole.count(e.id) || fragments.count(e.id)) {
        return "uses ORAM block " + std::to_string(e.id) + ", which another extent uses";
      }
      whole.insert(e.id);
    } else {
      if (e.slots >= layout.slots_per_block() || e.slot + e.slots > layout.slots_per_block()) {
        return "has fragment slots " + std::to_string(e.slot) + "+" + std::to_string(e.slots) +
               " outside a block of " + std::to_string(layout.slots_per_block());
      }
      const std::uint64_t mask = BlockLayout::Mask(e.slot, e.slots);
      if (whole.count(e.id) || (fragments.count(e.id) && (fragments[e.id] & mask) != 0)) {
        return "overlaps another extent in ORAM block " + std::to_string(e.id);
      }
      fragments[e.id] |= mask;
    }
    used.insert(e.id);
    highest_used_plus_one = std::max(highest_used_plus_one, e.id + 1);
    return "";
  };
  for (const auto& b : snap.blocks) {
    const std::string who = BlockOwner(snap, names, b);
    auto it = snap.inodes.find(b.ino);
    auto unmap = [&](const std::string& why) {
      problem(who + " " + why + ": unmapped", true);
      r.repairs.push_back({FsckRepair::Kind::kUnmapBlock, b.ino, b.idx, b.id});
      unmapped.insert(b.id);
      if (b.next) unmapped.insert(b.next->id);
    };
    if (it == snap.inodes.end()) {
      unmap("belongs to a missing inode");
      continue;
    }
    if (!IsReg(it->second.mode)) {
      unmap("belongs to a " + TypeName(it->second.mode));
      continue;
    }
    if (b.idx >= BlocksFor(it->second.size, bb)) {
      unmap("lies beyond the file size " + std::to_string(it->second.size));
      continue;
    }
    if (std::string why = claim(b.at()); !why.empty()) {
      unmap(why);
      continue;
    }
    if (b.next) {
      // A relocation the daemon had not finished: legal, and harmless to
      // drop if it is damaged (the data are still in the extent).
      if (std::string why = claim(*b.next); !why.empty()) {
        problem(who + " relocation target " + why + ": dropped", true);
        r.repairs.push_back({FsckRepair::Kind::kClearNext, b.ino, b.idx});
        unmapped.insert(b.next->id);
      }
    }
    const std::uint64_t in_size = std::min<std::uint64_t>(
        layout.Bytes(b.at()), std::min<std::uint64_t>(bb, it->second.size - b.idx * bb));
    std::int64_t valid = b.valid;
    if (valid < 0 || static_cast<std::uint64_t>(valid) > in_size) {
      const std::int64_t fixed =
          std::clamp<std::int64_t>(valid, 0, static_cast<std::int64_t>(in_size));
      problem(who + " has valid length " + std::to_string(valid) +
                  " beyond the file size or its extent: set to " + std::to_string(fixed),
              true);
      r.repairs.push_back(
          {FsckRepair::Kind::kSetValid, b.ino, b.idx, static_cast<std::uint64_t>(fixed)});
      valid = fixed;
    }
    if (valid > 0 && positioned.count(b.id) == 0) {
      // valid > 0 only after a successful write-back, which committed the
      // position first: the position row was lost.
      std::string m = who + " holds " + std::to_string(valid) +
                      " bytes of file data but the block has no position in the ORAM: its data "
                      "are lost";
      if (options.zero_damaged) {
        problem(m + "; it will read as zeros", true);
        r.repairs.push_back({FsckRepair::Kind::kSetValid, b.ino, b.idx, 0});
      } else {
        problem(m + " (--zero-damaged makes it read as zeros)", false);
      }
    }
  }
  // Shared blocks: their slot maps must be the union of their fragments.
  {
    bool rewrite = false;
    std::map<BlockId, const FsckSnapshot::Shared*> rows;
    for (const auto& sh : snap.shared) rows[sh.id] = &sh;
    for (const auto& [id, mask] : fragments) {
      auto it = rows.find(id);
      if (it == rows.end()) {
        problem("ORAM block " + std::to_string(id) +
                    " holds fragments but is not recorded as shared: recorded",
                true);
        rewrite = true;
      } else if (it->second->used != mask || it->second->nused != std::popcount(mask) ||
                 it->second->longest != static_cast<std::int64_t>(layout.LongestFree(mask))) {
        problem("shared ORAM block " + std::to_string(id) +
                    " has a slot map that disagrees with its fragments: recomputed",
                true);
        rewrite = true;
      }
    }
    for (const auto& sh : snap.shared) {
      if (!fragments.count(sh.id)) {
        problem("ORAM block " + std::to_string(sh.id) +
                    " is recorded as shared but holds no fragment: dropped from the shared list",
                true);
        rewrite = true;
      }
    }
    if (snap.fs_schema_version >= 3 && (rewrite || !unmapped.empty())) {
      r.repairs.push_back({FsckRepair::Kind::kRewriteShared});
    }
  }
  if (highest_used_plus_one > next && next <= cap) {
    problem("blocks up to " + std::to_string(highest_used_plus_one - 1) +
                " are mapped but next_unused is " + std::to_string(next) + ": raised",
            true);
    next = highest_used_plus_one;
    r.repairs.push_back({FsckRepair::Kind::kSetNextUnused, next});
  }
  std::set<BlockId> free_ids;
  for (BlockId id : snap.free_blocks) {
    if (id >= next) {
      problem("free-list block " + std::to_string(id) + " was never allocated (next_unused " +
                  std::to_string(next) + "): removed from the free list",
              true);
      r.repairs.push_back({FsckRepair::Kind::kRemoveFree, id});
    } else if (used.count(id)) {
      problem("block " + std::to_string(id) +
                  " is both mapped by a file and on the free list: "
                  "removed from the free list",
              true);
      r.repairs.push_back({FsckRepair::Kind::kRemoveFree, id});
    } else {
      free_ids.insert(id);
    }
  }
  std::vector<BlockId> leaked;
  for (BlockId id = 0; id < std::min(next, cap); ++id) {
    if (!used.count(id) && !free_ids.count(id)) {
      if (!unmapped.count(id)) leaked.push_back(id);
      r.repairs.push_back({FsckRepair::Kind::kAddFree, id});
    }
  }
  if (!leaked.empty()) {
    problem(std::to_string(leaked.size()) +
                " allocated block(s) are neither mapped by a file nor free (leaked): " +
                IdList(leaked) + ": returned to the free list",
            true);
  }
  std::vector<BlockId> stray;
  for (BlockId id : positioned) {
    if (id >= next && !used.count(id)) {
      stray.push_back(id);
      r.repairs.push_back({FsckRepair::Kind::kDeletePosition, id});
    }
  }
  if (!stray.empty()) {
    problem(std::to_string(stray.size()) +
                " ORAM block(s) have a position but were never allocated to a file (leaked): " +
                IdList(stray) + ": positions freed",
            true);
  }
  return r;
}

// --- repairs ----------------------------------------------------------------------

namespace {

// fs_shared recomputed from the fragments fs_blocks maps now (inside the
// repair transaction, after the plan's unmaps).
Status RewriteShared(sqlite3* db) {
  std::int64_t block_bytes = 0;
  {
    Stmt q(db, "SELECT value FROM fs_meta WHERE key = 'block_bytes'");
    S3ORAM_RETURN_IF_ERROR(q.ok("repair"));
    Status err;
    if (!q.Next(&err)) return err.ok() ? Status::Corruption("fs_meta lacks block_bytes") : err;
    block_bytes = q.Col(0);
  }
  const BlockLayout layout(static_cast<std::uint32_t>(block_bytes));
  std::map<BlockId, std::uint64_t> masks;
  {
    Stmt q(db, "SELECT block_id, slot, slots FROM fs_blocks WHERE slots > 0 UNION ALL "
               "SELECT next_id, next_slot, next_slots FROM fs_blocks WHERE next_slots > 0");
    S3ORAM_RETURN_IF_ERROR(q.ok("repair"));
    Status err;
    while (q.Next(&err)) {
      masks[q.UCol(0)] |= BlockLayout::Mask(static_cast<std::uint32_t>(q.Col(1)),
                                            static_cast<std::uint32_t>(q.Col(2)));
    }
    S3ORAM_RETURN_IF_ERROR(err);
  }
  S3ORAM_RETURN_IF_ERROR(ExecSql(db, "DELETE FROM fs_shared"));
  for (const auto& [id, used] : masks) {
    Stmt q(db, "INSERT INTO fs_shared(block_id, used, nused, longest) VALUES (?1, ?2, ?3, ?4)");
    S3ORAM_RETURN_IF_ERROR(q.ok("repair"));
    S3ORAM_RETURN_IF_ERROR(q.Bind(1, ToSql(id))
                               .Bind(2, ToSql(used))
                               .Bind(3, std::popcount(used))
                               .Bind(4, layout.LongestFree(used))
                               .Run());
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
  S3ORAM_RETURN_IF_ERROR(ExecSql(db, "PRAGMA synchronous = FULL"));
  S3ORAM_RETURN_IF_ERROR(ExecSql(db, "BEGIN IMMEDIATE").WithContext(state_path));
  auto apply = [&]() -> Status {
    std::optional<Ino> lost_found;
    auto find_lost_found = [&]() -> Status {
      if (lost_found) return Status::Ok();
      Stmt q(db, "SELECT ino FROM fs_dirents WHERE parent = 1 AND name = ?1");
      S3ORAM_RETURN_IF_ERROR(q.ok("finding lost+found"));
      q.BindBlob(1, kLostFoundName);
      Status err;
      if (!q.Next(&err)) return err.ok() ? Status::FailedPrecondition("no /lost+found") : err;
      lost_found = q.UCol(0);
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
          Stmt q(db, "DELETE FROM positions WHERE id = ?1");
          S3ORAM_RETURN_IF_ERROR(q.ok("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Bind(1, ToSql(f.a)).Run());
          break;
        }
        case K::kDeleteEntry: {
          Stmt q(db, "DELETE FROM fs_dirents WHERE cookie = ?1");
          S3ORAM_RETURN_IF_ERROR(q.ok("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Bind(1, ToSql(f.a)).Run());
          break;
        }
        case K::kCreateLostFound: {
          Stmt q(db,
                 "INSERT INTO fs_inodes(mode, uid, gid, nlink, size, rdev, atime_ns, mtime_ns, "
                 "ctime_ns) VALUES (?1, ?2, ?3, ?4, 0, 0, ?5, ?5, ?5)");
          S3ORAM_RETURN_IF_ERROR(q.ok("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Bind(1, S_IFDIR | 0700)
                                     .Bind(2, ToSql(f.a))
                                     .Bind(3, ToSql(f.b))
                                     .Bind(4, ToSql(f.c))
                                     .Bind(5, now)
                                     .Run());
          lost_found = FromSql(sqlite3_last_insert_rowid(db));
          Stmt e(db, "INSERT INTO fs_dirents(parent, name, ino) VALUES (1, ?1, ?2)");
          S3ORAM_RETURN_IF_ERROR(e.ok("repair"));
          S3ORAM_RETURN_IF_ERROR(e.BindBlob(1, kLostFoundName).Bind(2, ToSql(*lost_found)).Run());
          break;
        }
        case K::kLinkLostFound: {
          S3ORAM_RETURN_IF_ERROR(find_lost_found());
          Stmt e(db, "INSERT INTO fs_dirents(parent, name, ino) VALUES (?1, ?2, ?3)");
          S3ORAM_RETURN_IF_ERROR(e.ok("repair"));
          S3ORAM_RETURN_IF_ERROR(
              e.Bind(1, ToSql(*lost_found)).BindBlob(2, f.name).Bind(3, ToSql(f.a)).Run());
          Stmt t(db, "UPDATE fs_inodes SET mtime_ns = ?1, ctime_ns = ?1 WHERE ino = ?2");
          S3ORAM_RETURN_IF_ERROR(t.ok("repair"));
          S3ORAM_RETURN_IF_ERROR(t.Bind(1, now).Bind(2, ToSql(*lost_found)).Run());
          break;
        }
        case K::kSetNlink: {
          Stmt q(db, "UPDATE fs_inodes SET nlink = ?1, ctime_ns = ?2 WHERE ino = ?3");
          S3ORAM_RETURN_IF_ERROR(q.ok("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Bind(1, ToSql(f.b)).Bind(2, now).Bind(3, ToSql(f.a)).Run());
          break;
        }
        case K::kUnmapBlock: {
          // The id is returned to the free list by a kAddFree of the same
          // plan if it is in the allocated range.
          Stmt q(db, "DELETE FROM fs_blocks WHERE ino = ?1 AND idx = ?2");
          S3ORAM_RETURN_IF_ERROR(q.ok("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Bind(1, ToSql(f.a)).Bind(2, ToSql(f.b)).Run());
          break;
        }
        case K::kSetValid: {
          Stmt q(db, "UPDATE fs_blocks SET valid = ?1 WHERE ino = ?2 AND idx = ?3");
          S3ORAM_RETURN_IF_ERROR(q.ok("repair"));
          S3ORAM_RETURN_IF_ERROR(
              q.Bind(1, ToSql(f.c)).Bind(2, ToSql(f.a)).Bind(3, ToSql(f.b)).Run());
          break;
        }
        case K::kClearNext: {
          Stmt q(db,
                 "UPDATE fs_blocks SET next_id = NULL, next_slot = NULL, next_slots = NULL "
                 "WHERE ino = ?1 AND idx = ?2");
          S3ORAM_RETURN_IF_ERROR(q.ok("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Bind(1, ToSql(f.a)).Bind(2, ToSql(f.b)).Run());
          break;
        }
        case K::kRewriteShared:
          S3ORAM_RETURN_IF_ERROR(RewriteShared(db));
          break;
        case K::kAddFree: {
          Stmt q(db, "INSERT OR IGNORE INTO fs_free_blocks(block_id) VALUES (?1)");
          S3ORAM_RETURN_IF_ERROR(q.ok("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Bind(1, ToSql(f.a)).Run());
          break;
        }
        case K::kRemoveFree: {
          Stmt q(db, "DELETE FROM fs_free_blocks WHERE block_id = ?1");
          S3ORAM_RETURN_IF_ERROR(q.ok("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Bind(1, ToSql(f.a)).Run());
          break;
        }
        case K::kSetNextUnused: {
          Stmt q(db, "UPDATE fs_meta SET value = ?1 WHERE key = 'next_unused'");
          S3ORAM_RETURN_IF_ERROR(q.ok("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Bind(1, ToSql(f.a)).Run());
          break;
        }
        case K::kDeleteSymlinkRow: {
          Stmt q(db, "DELETE FROM fs_symlinks WHERE ino = ?1");
          S3ORAM_RETURN_IF_ERROR(q.ok("repair"));
          S3ORAM_RETURN_IF_ERROR(q.Bind(1, ToSql(f.a)).Run());
          break;
        }
        case K::kDeleteStrayXattrs:
          S3ORAM_RETURN_IF_ERROR(
              ExecSql(db, "DELETE FROM fs_xattrs WHERE ino NOT IN (SELECT ino FROM fs_inodes)"));
          break;
      }
    }
    return ExecSql(db, "COMMIT");
  };
  Status s = apply();
  if (!s.ok()) {
    if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return s.WithContext(state_path + ": repairs (nothing changed)");
  }
  return Status::Ok();
}

// --- phase 3: the blocks ------------------------------------------------------------

FsckBlockResult CheckBlocks(OramClient& client, const FsckSnapshot& snap,
                            const FsckOptions& options,
                            const std::function<void(std::uint64_t, std::uint64_t)>& progress,
                            const std::atomic<bool>* cancel) {
  FsckBlockResult r;
  const PathNamer names(snap);
  // Blocks holding file data that the ORAM has a position for (the others
  // read as zeros without an access, or were reported by phase 2).
  // A shared block is read once for all of its fragments.
  std::map<BlockId, std::vector<const FsckSnapshot::Block*>> todo;
  for (const auto& b : snap.blocks) {
    if (b.valid > 0 && b.id < client.params().capacity_blocks && client.position_map().Find(b.id)) {
      todo[b.id].push_back(&b);
    }
  }
  const std::uint64_t total = todo.size();
  if (progress) progress(0, total);
  for (const auto& [id, owners] : todo) {
    if (cancel && cancel->load()) {
      r.cancelled = true;
      return r;
    }
    auto data = client.Read(id);
    if (!data.ok()) {
      if (cancel && cancel->load()) {
        r.cancelled = true;
        return r;
      }
      if (data.status().code() != Status::Code::kIntegrity) {
        r.fatal = data.status().WithContext("reading ORAM block " + std::to_string(id));
        return r;
      }
      for (const FsckSnapshot::Block* b : owners) {
        std::string m = BlockOwner(snap, names, *b) +
                        " is damaged: it does not authenticate (AEAD tag or version mismatch)";
        if (options.zero_damaged) {
          r.problems.push_back({3, m + "; it will read as zeros", true});
          r.repairs.push_back({FsckRepair::Kind::kSetValid, b->ino, b->idx, 0});
        } else {
          r.problems.push_back({3, m + " (--zero-damaged makes it read as zeros)", false});
        }
      }
    }
    ++r.blocks_read;
    if (progress) progress(r.blocks_read, total);
  }
  return r;
}

}  // namespace s3oram::fs

// MetadataStore (metadata_store.h): opening the tables (creation, the
// version 2 to 3 migration, the checks against the ORAM's shape) and Sync.
// The operations live in metadata_names.cpp, metadata_xattrs.cpp and
// metadata_blocks.cpp, the consistency check in metadata_invariants.cpp; the
// schema in metadata_schema.h.
#include "fused/metadata_store.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "fused/metadata_store_internal.h"

namespace s3oram::fs {

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
  sqlite3_busy_timeout(db, metadata_detail::kBusyTimeoutMs);
  sqlite3_extended_result_codes(db, 1);
  if (Status s = sql::Exec(db, "PRAGMA journal_mode = WAL"); !s.ok()) return fail(s);
  if (Status s = sql::Exec(db, "PRAGMA synchronous = NORMAL"); !s.ok()) return fail(s);
  if (Status s = sql::Exec(db, "BEGIN IMMEDIATE"); !s.ok()) return fail(s);
  auto rollback_fail = [&](Status s) -> Status {
    (void)sql::Exec(db, "ROLLBACK");
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
      Status s = sql::Error(db, src, std::string("reading fs_meta ") + key);
      sqlite3_finalize(q);
      return s;
    }
    sqlite3_finalize(q);
    return Status::Ok();
  };

  std::optional<std::int64_t> version;
  if (Status s = read_meta("schema_version", &version); !s.ok()) return rollback_fail(s);
  if (Status s = sql::Exec(db, kFsLostTableSql); !s.ok()) return rollback_fail(s);
  if (version && *version == 2) {
    // Whole blocks only: every mapping becomes a whole extent.
    if (Status s = sql::Exec(db, kFsMigrate2To3Sql); !s.ok()) return rollback_fail(s);
    const std::string spb =
        "INSERT OR REPLACE INTO fs_meta(key, value) VALUES "
        "('slots_per_block', " +
        std::to_string(BlockLayout::SlotsPerBlock(block_bytes)) + ")";
    if (Status s = sql::Exec(db, spb.c_str()); !s.ok()) return rollback_fail(s);
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
    if (Status s = sql::Exec(db, kFsSchemaSql); !s.ok()) return rollback_fail(s);
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
    if (Status s = sql::Exec(db, init.c_str()); !s.ok()) return rollback_fail(s);
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
      return rollback_fail(
          Status::Corruption("fs_meta slots_per_block is " + std::to_string(*spb) + ", not " +
                             std::to_string(BlockLayout::SlotsPerBlock(block_bytes))));
    }
    if (FromSql(*next) > capacity_blocks) {
      return rollback_fail(Status::Corruption("fs_meta next_unused beyond capacity"));
    }
  }
  if (Status s = sql::Exec(db, "COMMIT"); !s.ok()) return rollback_fail(s);
  std::unique_ptr<MetadataStore> store(new MetadataStore(db, capacity_blocks, block_bytes));
  store->state_ = std::move(state);
  return store;
}

int MetadataStore::Sync() {
  std::lock_guard<std::mutex> lock(mu_);
  // A commit under synchronous=FULL fsyncs the WAL, which holds every earlier
  // commit too; a commit needs a change, so bump a counter.
  Status s = sql::Exec(db_, "PRAGMA synchronous = FULL");
  if (s.ok()) {
    s = sql::Exec(db_,
                  "BEGIN IMMEDIATE; UPDATE fs_meta SET value = value + 1 WHERE key = 'sync_count'; "
                  "COMMIT");
    if (!s.ok()) (void)sql::Exec(db_, "ROLLBACK");
  }
  Status restore = sql::Exec(db_, "PRAGMA synchronous = NORMAL");
  if (s.ok()) s = restore;
  if (!s.ok()) {
    last_error_ = s.message();
    return EIO;
  }
  return 0;
}

}  // namespace s3oram::fs

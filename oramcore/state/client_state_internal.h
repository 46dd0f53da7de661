// What both halves of ClientStateStore share (client_state.cpp: create and
// commit; client_state_open.cpp: open, check and load): the schema and its
// version markers, the OramParams fields as meta rows, the share MAC rows,
// the sanity bounds applied on create and on load, and the connection
// settings. Internal to oramcore/state: nothing else includes it.
#pragma once

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "oramcore/base/status.h"
#include "oramcore/crypto/share_mac_secrets.h"
#include "oramcore/math/share_mac.h"
#include "oramcore/state/client_state.h"
#include "oramcore/state/sql.h"

namespace s3oram::client_state_internal {

inline constexpr std::int64_t kSchemaVersion = 2;
inline constexpr std::int64_t kStoredShareMacSchemaVersion = 3;
// A version with a rotation under way: far from any later schema's number.
inline constexpr std::int64_t kRekeyVersionOffset = 1000;

inline constexpr const char* kShareMacPrefix = "share_mac_";
inline constexpr const char* kOldShareMacPrefix = "rekey_old_share_mac_";

// The ShareMacSecrets rows under `prefix`: nullopt if none is there,
// Corruption if only some are or one is malformed.
inline Result<std::optional<ShareMacSecrets>> ReadShareMacRows(sqlite3* db,
                                                               const std::string& prefix) {
  sql::Stmt st;
  S3ORAM_RETURN_IF_ERROR(st.Prepare(db, "SELECT value FROM meta WHERE key = ?1"));
  ShareMacSecrets out;
  int present = 0;
  for (std::size_t h = 0; h < share_mac::kHalves; ++h) {
    const std::string key = prefix + "half" + std::to_string(h);
    st.Text(1, key);
    S3ORAM_ASSIGN_OR_RETURN(const bool row, st.Step("reading the share MAC secrets"));
    if (row) {
      if (sqlite3_column_type(st.get(), 0) != SQLITE_BLOB ||
          sqlite3_column_bytes(st.get(), 0) != static_cast<int>(share_mac::kKeyBytes)) {
        return Status::Corruption("meta row '" + key + "' is not a 32-byte blob");
      }
      out.half[h] = Secret::CopyOf(
          std::span(static_cast<const std::uint8_t*>(sqlite3_column_blob(st.get(), 0)),
                    share_mac::kKeyBytes));
      ++present;
    }
    sqlite3_reset(st.get());
  }
  const std::string last_key = prefix + "last_replaced";
  st.Text(1, last_key);
  S3ORAM_ASSIGN_OR_RETURN(const bool row, st.Step("reading the share MAC secrets"));
  if (row) {
    const std::int64_t last = sqlite3_column_int64(st.get(), 0);
    if (sqlite3_column_type(st.get(), 0) != SQLITE_INTEGER || last < 0 ||
        last >= static_cast<std::int64_t>(share_mac::kHalves)) {
      return Status::Corruption("meta row '" + last_key + "' is not a half (0 or 1)");
    }
    out.last_replaced = static_cast<std::size_t>(last);
    ++present;
  }
  sqlite3_reset(st.get());
  if (present == 0) return std::optional<ShareMacSecrets>();
  if (present != static_cast<int>(share_mac::kHalves) + 1) {
    return Status::Corruption("meta holds some of the rows " + prefix +
                              "half0, half1, last_replaced but not all");
  }
  return std::optional<ShareMacSecrets>(std::move(out));
}

inline Status WriteShareMacRows(sqlite3* db, const std::string& prefix, const ShareMacSecrets& s) {
  sql::Stmt st;
  S3ORAM_RETURN_IF_ERROR(
      st.Prepare(db,
                 "INSERT OR REPLACE INTO meta(key, value) VALUES (?1 || 'half0', ?2), "
                 "(?1 || 'half1', ?3), (?1 || 'last_replaced', ?4)"));
  st.Text(1, prefix);
  st.Blob(2, s.half[0].data(), s.half[0].size());
  st.Blob(3, s.half[1].data(), s.half[1].size());
  st.Int(4, static_cast<std::int64_t>(s.last_replaced));
  return st.Exec("writing the share MAC secrets");
}
// PRAGMA application_id: "S3OR" read as a big-endian 32-bit integer, which is
// how SQLite stores it at header offset 68 (so `xxd` shows "S3OR").
inline constexpr std::int32_t kApplicationId = 0x53334f52;
inline constexpr int kBusyTimeoutMs = 5000;

using sql::FromSql;
using sql::Stmt;
using sql::ToSql;

// Sanity bounds this file relies on when it turns stored parameters into a
// tree geometry and a position map: shifts by H must be defined, and the map
// allocates one entry per block of capacity, which must match the tree. The
// full parameter policy (ValidateParams) lives in params.cpp; this is only the
// subset that keeps loading safe, applied identically by Create and Open so
// nothing Create writes is later refused.
inline std::string ParamsProblem(const OramParams& p) {
  if (p.height < 1 || p.height > 62) {
    return "height " + std::to_string(p.height) + " not in [1, 62]";
  }
  if (p.bucket_size == 0) return "bucket_size is 0";
  if (p.evict_rate == 0) return "evict_rate is 0";
  // The position map is sized from these before any row is read: refuse what
  // no valid filesystem has (ValidateParams' bounds) rather than allocate it.
  if (p.bucket_size > kMaxBucketSize) {
    return "bucket_size " + std::to_string(p.bucket_size) + " exceeds " +
           std::to_string(kMaxBucketSize);
  }
  if (p.capacity_blocks > kMaxCapacityBlocks) {
    return "capacity_blocks " + std::to_string(p.capacity_blocks) + " exceeds 2^32";
  }
  const std::uint32_t shift = p.height - 1;
  // A * 2^(H-1), saturating at 2^64 - 1 when the product does not fit.
  const std::uint64_t max_blocks = static_cast<unsigned>(std::bit_width(p.evict_rate)) + shift > 64
                                       ? ~std::uint64_t{0}
                                       : std::uint64_t{p.evict_rate} << shift;
  if (p.capacity_blocks > max_blocks) {
    return "capacity_blocks " + std::to_string(p.capacity_blocks) +
           " exceeds A * 2^(H-1) = " + std::to_string(max_blocks);
  }
  return "";
}

// Why an entry cannot be stored in or loaded into a map of these parameters,
// or "" if it can.
inline std::string PositionProblem(const OramParams& p, BlockId id, const Position& pos) {
  const TreeGeometry geo = p.geometry();
  if (id >= p.capacity_blocks) {
    return "block id " + std::to_string(id) + " >= capacity " + std::to_string(p.capacity_blocks);
  }
  if (!geo.is_leaf(pos.leaf)) {
    return "leaf " + std::to_string(pos.leaf) + " is not a leaf of a tree of height " +
           std::to_string(p.height);
  }
  if (pos.level > p.height) {
    return "level " + std::to_string(pos.level) + " > height " + std::to_string(p.height);
  }
  if (pos.slot >= p.bucket_size) {
    return "slot " + std::to_string(pos.slot) + " >= bucket size " + std::to_string(p.bucket_size);
  }
  return "";
}

// The OramParams fields as meta rows, in one table so that store and load
// cannot drift apart. u32 fields are range-checked on load.
struct ParamField {
  const char* key;
  std::uint32_t OramParams::*u32;
  std::uint64_t OramParams::*u64;
};
inline constexpr ParamField kParamFields[] = {
    {"height", &OramParams::height, nullptr},
    {"bucket_size", &OramParams::bucket_size, nullptr},
    {"evict_rate", &OramParams::evict_rate, nullptr},
    {"block_bytes", &OramParams::block_bytes, nullptr},
    {"capacity_blocks", nullptr, &OramParams::capacity_blocks},
    {"lambda", &OramParams::lambda, nullptr},
    {"parties", &OramParams::parties, nullptr},
    {"threshold", &OramParams::threshold, nullptr},
};

inline constexpr const char* kSchemaSql = R"sql(
CREATE TABLE meta(
  key TEXT PRIMARY KEY NOT NULL,
  value NOT NULL
) WITHOUT ROWID;
CREATE TABLE servers(
  idx INTEGER PRIMARY KEY CHECK (idx >= 0),
  endpoint TEXT NOT NULL,
  public_key TEXT NOT NULL
);
CREATE TABLE counters(
  id INTEGER PRIMARY KEY CHECK (id = 0),
  nr INTEGER NOT NULL,
  ne INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  epoch INTEGER NOT NULL
);
CREATE TABLE positions(
  id INTEGER PRIMARY KEY,
  leaf INTEGER NOT NULL,
  level INTEGER NOT NULL CHECK (level >= 0),
  slot INTEGER NOT NULL CHECK (slot >= 0),
  version INTEGER NOT NULL
);
CREATE TABLE pending(
  seq INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,
  payload BLOB NOT NULL
);
INSERT INTO counters(id, nr, ne, seq, epoch) VALUES (0, 0, 0, 0, 0);
)sql";

// Closes the connection when an Open/Create fails half-way.
struct DbCloser {
  sqlite3*& db;
  ~DbCloser() {
    if (db != nullptr) sqlite3_close_v2(db);
    db = nullptr;
  }
};

// Connection settings that do not touch the file (they are per connection).
inline Status ConfigureConnection(sqlite3* db) {
  int rc = sqlite3_busy_timeout(db, kBusyTimeoutMs);
  if (rc != SQLITE_OK) return sql::Error(db, rc, "setting busy timeout");
  rc = sqlite3_extended_result_codes(db, 1);
  if (rc != SQLITE_OK) return sql::Error(db, rc, "enabling extended result codes");
  S3ORAM_RETURN_IF_ERROR(sql::Exec(db, "PRAGMA foreign_keys = ON"));
  // NORMAL in WAL mode: a commit survives a process crash; Commit(durable)
  // raises it to FULL for that one transaction.
  S3ORAM_RETURN_IF_ERROR(sql::Exec(db, "PRAGMA synchronous = NORMAL"));
  return Status::Ok();
}

inline Status EnableWal(sqlite3* db) {
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(st.Prepare(db, "PRAGMA journal_mode = WAL"));
  S3ORAM_ASSIGN_OR_RETURN(bool row, st.Step("setting WAL journal mode"));
  const unsigned char* mode = row ? sqlite3_column_text(st.get(), 0) : nullptr;
  if (mode == nullptr || std::strcmp(reinterpret_cast<const char*>(mode), "wal") != 0) {
    // E.g. a filesystem without shared-memory support. Crash consistency is
    // designed around WAL, so refuse rather than run in another mode.
    return Status::IoError(std::string("could not enable WAL journal mode (got ") +
                           (mode ? reinterpret_cast<const char*>(mode) : "nothing") + ")");
  }
  return Status::Ok();
}

// fsyncs the directory holding `path`, so that a newly created state file's
// directory entry survives a power loss along with its contents.
inline Status SyncParentDir(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IoError("opening directory " + dir + ": " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Status::IoError("syncing directory " + dir + ": " + std::strerror(err));
  return Status::Ok();
}

}  // namespace s3oram::client_state_internal

// ClientStateStore: the SQLite side of the client state (see client_state.h).
//
// Identification. An s3oram state file is an SQLite database whose header has
// application_id = 'S3OR' and user_version = kSchemaVersion; the meta table
// repeats the schema version. Open checks all of them, using reads only, before
// it changes anything (even the journal mode, which is stored in the file
// header), so a file it refuses is left byte-identical.
//
// Encoding. SQLite integers are signed 64-bit; every u64 (counters, versions,
// ids) is stored as its two's-complement bit pattern and read back the same
// way, so the full u64 range round-trips. u32 fields are range-checked on load.
//
// While a master-key rotation is under way the header's user_version is
// kRekeyVersionOffset above the schema version (the schema is the same plus
// the rekey rows), so that a build that does not know rotations refuses the
// file rather than read blocks still sealed under the previous key as
// damaged.
//
// Schema version 3 is version 2 plus the share MAC's secrets (the share_mac_
// rows below), which a state gets from its first rekey on: a build that
// derives the share MAC from the master key alone must refuse it, since it
// would take every slot for damaged. A state without those rows stays at 2.
//
// Schema (version 2 or 3; version 1 had no key wrap and unsealed blocks):
//   meta(key TEXT PRIMARY KEY, value)   schema_version, fs_id (16-byte BLOB),
//                                       every OramParams field, allow_unsafe,
//                                       kdf_ops, kdf_mem, key_salt (16-byte
//                                       BLOB), key_nonce (24), key_sealed (48),
//                                       client_key_file (TEXT), mac_elems
//                                       (absent before share MACs: 0); optional
//                                       backup_generation, backup_epoch
//                                       (the BackupMark: both or neither);
//                                       optional problem_text (TEXT),
//                                       problem_unix, problem_damaged (the
//                                       ProblemNote; problem_damaged absent
//                                       in states older than it: false);
//                                       optional eviction_estimate_ms (the
//                                       last background eviction's time);
//                                       rekey_old_master (32-byte BLOB),
//                                       rekey_phase, rekey_next_block,
//                                       rekey_purge_until: all four while a
//                                       master-key rotation is under way,
//                                       none otherwise;
//                                       share_mac_half0, share_mac_half1
//                                       (32-byte BLOBs), share_mac_last_replaced
//                                       (the ShareMacSecrets): all three in
//                                       version 3, none in version 2 (both
//                                       halves derived from the master key);
//                                       rekey_old_share_mac_half0, _half1,
//                                       _last_replaced: the pair before the
//                                       rotation under way, if it started at
//                                       version 3 (else derived from
//                                       rekey_old_master)
//   servers(idx INTEGER PRIMARY KEY, endpoint TEXT, public_key TEXT)
//                                       idx = party index 0..n-1; public_key
//                                       is the server's CURVE key (Z85)
//   counters(id = 0, nr, ne, seq, epoch)              exactly one row
//   positions(id INTEGER PRIMARY KEY, leaf, level, slot, version)
//   pending(seq INTEGER PRIMARY KEY, kind TEXT, payload BLOB)
// positions deliberately has no UNIQUE(leaf, level, slot) index: a batch that
// moves blocks between slots would transiently violate it row by row, and it
// would slow the large batches evictions write. Slot uniqueness is checked by
// PositionMap::Place when the map is loaded.
#include "oramcore/state/client_state.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <span>
#include <utility>

#include "oramcore/base/fault_point.h"
#include "oramcore/crypto/curve_keys.h"
#include "oramcore/crypto/share_mac_secrets.h"
#include "oramcore/math/share_mac.h"
#include "oramcore/state/sql.h"

namespace s3oram {
namespace {

constexpr std::int64_t kSchemaVersion = 2;
constexpr std::int64_t kStoredShareMacSchemaVersion = 3;
// A version with a rotation under way: far from any later schema's number.
constexpr std::int64_t kRekeyVersionOffset = 1000;

constexpr const char* kShareMacPrefix = "share_mac_";
constexpr const char* kOldShareMacPrefix = "rekey_old_share_mac_";

// The ShareMacSecrets rows under `prefix`: nullopt if none is there,
// Corruption if only some are or one is malformed.
Result<std::optional<ShareMacSecrets>> ReadShareMacRows(sqlite3* db, const std::string& prefix) {
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

Status WriteShareMacRows(sqlite3* db, const std::string& prefix, const ShareMacSecrets& s) {
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
constexpr std::int32_t kApplicationId = 0x53334f52;
constexpr int kBusyTimeoutMs = 5000;

using sql::FromSql;
using sql::Stmt;
using sql::ToSql;

// Sanity bounds this file relies on when it turns stored parameters into a
// tree geometry and a position map: shifts by H must be defined, and the map
// allocates one entry per block of capacity, which must match the tree. The
// full parameter policy (ValidateParams) lives in params.cpp; this is only the
// subset that keeps loading safe, applied identically by Create and Open so
// nothing Create writes is later refused.
std::string ParamsProblem(const OramParams& p) {
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
  const std::uint64_t max_blocks =
      static_cast<unsigned>(std::bit_width(p.evict_rate)) + shift > 64
          ? ~std::uint64_t{0}
          : std::uint64_t{p.evict_rate} << shift;
  if (p.capacity_blocks > max_blocks) {
    return "capacity_blocks " + std::to_string(p.capacity_blocks) + " exceeds A * 2^(H-1) = " +
           std::to_string(max_blocks);
  }
  return "";
}

// Why an entry cannot be stored in or loaded into a map of these parameters,
// or "" if it can.
std::string PositionProblem(const OramParams& p, BlockId id, const Position& pos) {
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
constexpr ParamField kParamFields[] = {
    {"height", &OramParams::height, nullptr},
    {"bucket_size", &OramParams::bucket_size, nullptr},
    {"evict_rate", &OramParams::evict_rate, nullptr},
    {"block_bytes", &OramParams::block_bytes, nullptr},
    {"capacity_blocks", nullptr, &OramParams::capacity_blocks},
    {"lambda", &OramParams::lambda, nullptr},
    {"parties", &OramParams::parties, nullptr},
    {"threshold", &OramParams::threshold, nullptr},
};

constexpr const char* kSchemaSql = R"sql(
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
Status ConfigureConnection(sqlite3* db) {
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

Status EnableWal(sqlite3* db) {
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
Status SyncParentDir(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  const std::string dir =
      slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IoError("opening directory " + dir + ": " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Status::IoError("syncing directory " + dir + ": " + std::strerror(err));
  return Status::Ok();
}



}  // namespace

bool ClientStateStore::Batch::empty() const {
  return !counters_ && puts_.empty() && erases_.empty() && add_pending_.empty() &&
         remove_pending_.empty() && !backup_mark_ && !problem_note_ &&
         !eviction_estimate_ms_ && !rekey_progress_ && !end_rekey_;
}

Result<std::unique_ptr<ClientStateStore>> ClientStateStore::Create(const std::string& path,
                                                                    const FsConfig& config,
                                                                    Secret master) {
  if (std::string problem = ParamsProblem(config.params); !problem.empty()) {
    return Status::InvalidArgument("client state parameters: " + problem);
  }
  if (config.server_keys.size() != config.servers.size()) {
    return Status::InvalidArgument("client state: one CURVE public key per server expected");
  }
  S3ORAM_RETURN_IF_ERROR(ValidateKdfParams(config.key_wrap.kdf));
  // UnlockedState::Create makes the file with O_EXCL and mode 0600 (SQLite
  // gives the -wal and -shm files the database file's mode) and writes the
  // header with the wrapped key; the database is sealed from its first page.
  StateHeader header;
  header.fs_id = config.fs_id;
  header.wrap = config.key_wrap;
  auto unlocked = UnlockedState::Create(path, header, std::move(master));
  if (!unlocked.ok()) {
    if (unlocked.status().code() == Status::Code::kAlreadyExists) {
      return Status::AlreadyExists(path + ": already exists; refusing to overwrite");
    }
    return unlocked.status().WithContext(path + ": creating client state");
  }

  // From here on the file is ours: on any failure remove it (and SQLite's side
  // files) so that Create can simply be retried. The connection is closed
  // first so that SQLite cannot recreate a side file after the unlink.
  sqlite3* db = nullptr;
  DbCloser closer{db};
  auto fail = [&path, &db](const Status& s) {
    if (db != nullptr) sqlite3_close_v2(db);
    db = nullptr;
    ::unlink((path + "-wal").c_str());
    ::unlink((path + "-shm").c_str());
    ::unlink(path.c_str());
    return s.WithContext(path + ": creating client state");
  };
  std::unique_ptr<ClientStateStore> store(new ClientStateStore());
  store->path_ = path;
  store->config_ = config;
  store->state_ = std::shared_ptr<UnlockedState>(std::move(*unlocked));
  store->schema_version_ = kSchemaVersion;
  store->share_mac_ = DeriveShareMacSecrets(store->state_->master());
  auto opened = store->state_->OpenDatabase();
  if (!opened.ok()) return fail(opened.status());
  db = *opened;
  if (Status s = ConfigureConnection(db); !s.ok()) return fail(s);
  if (Status s = EnableWal(db); !s.ok()) return fail(s);
  // The initial contents are worth a full sync: a state that vanishes after a
  // power cut would orphan whatever the servers are initialised with.
  if (Status s = sql::Exec(db, "PRAGMA synchronous = FULL"); !s.ok()) return fail(s);

  auto populate = [&]() -> Status {
    S3ORAM_RETURN_IF_ERROR(sql::Exec(db, "BEGIN IMMEDIATE"));
    S3ORAM_RETURN_IF_ERROR(sql::Exec(db, kSchemaSql));
    const std::string ids = "PRAGMA application_id = " + std::to_string(kApplicationId) +
                            "; PRAGMA user_version = " + std::to_string(kSchemaVersion);
    S3ORAM_RETURN_IF_ERROR(sql::Exec(db, ids.c_str()));

    Stmt meta;
    S3ORAM_RETURN_IF_ERROR(meta.Prepare(db, "INSERT INTO meta(key, value) VALUES (?1, ?2)"));
    auto put_int = [&meta](const char* key, std::int64_t v) {
      meta.Text(1, key);
      meta.Int(2, v);
      return meta.Exec("writing meta");
    };
    S3ORAM_RETURN_IF_ERROR(put_int("schema_version", kSchemaVersion));
    meta.Text(1, "fs_id");
    meta.Blob(2, config.fs_id.data(), config.fs_id.size());
    S3ORAM_RETURN_IF_ERROR(meta.Exec("writing meta"));
    for (const ParamField& f : kParamFields) {
      std::int64_t v = f.u32 ? std::int64_t{config.params.*f.u32} : ToSql(config.params.*f.u64);
      S3ORAM_RETURN_IF_ERROR(put_int(f.key, v));
    }
    S3ORAM_RETURN_IF_ERROR(put_int("mac_elems", config.params.mac_elems));
    S3ORAM_RETURN_IF_ERROR(put_int("allow_unsafe", config.allow_unsafe ? 1 : 0));
    meta.Text(1, "client_key_file");
    meta.Text(2, config.client_key_file);
    S3ORAM_RETURN_IF_ERROR(meta.Exec("writing meta"));

    Stmt srv;
    S3ORAM_RETURN_IF_ERROR(
        srv.Prepare(db, "INSERT INTO servers(idx, endpoint, public_key) VALUES (?1, ?2, ?3)"));
    for (std::size_t i = 0; i < config.servers.size(); ++i) {
      srv.Int(1, static_cast<std::int64_t>(i));
      srv.Text(2, config.servers[i]);
      srv.Text(3, config.server_keys[i]);
      S3ORAM_RETURN_IF_ERROR(srv.Exec("writing servers"));
    }
    return sql::Exec(db, "COMMIT");
  };
  if (Status s = populate(); !s.ok()) {
    if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return fail(s);
  }
  if (Status s = sql::Exec(db, "PRAGMA synchronous = NORMAL"); !s.ok()) return fail(s);
  if (Status s = SyncParentDir(path); !s.ok()) return fail(s);
  store->db_ = std::exchange(db, nullptr);
  return store;
}

Result<std::unique_ptr<ClientStateStore>> ClientStateStore::Open(
    std::shared_ptr<UnlockedState> state) {
  const std::string path = state->path();
  std::unique_ptr<ClientStateStore> store(new ClientStateStore());
  store->path_ = path;
  store->state_ = std::move(state);
  sqlite3* db = nullptr;
  DbCloser closer{db};
  auto fail = [&path](const Status& s) { return s.WithContext(path); };
  // Never creates: the sealed VFS refuses a file without its header.
  S3ORAM_ASSIGN_OR_RETURN(db, store->state_->OpenDatabase());
  int rc = sqlite3_busy_timeout(db, kBusyTimeoutMs);
  if (rc != SQLITE_OK) return fail(sql::Error(db, rc, "setting busy timeout"));

  // Identity checks: reads only. The first read also makes SQLite parse the
  // header and detect a truncated file (declared size beyond the end).
  auto app_id = sql::QueryInt(db, "PRAGMA application_id");
  if (!app_id.ok()) {
    return fail(app_id.status().WithContext("not a readable SQLite database"));
  }
  if (*app_id != kApplicationId) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "an SQLite database but not an s3oram client state (application_id 0x%08llx, "
                  "expected 0x%08x)",
                  static_cast<unsigned long long>(static_cast<std::uint32_t>(*app_id)),
                  static_cast<unsigned>(kApplicationId));
    return fail(Status::Corruption(buf));
  }
  auto user_version = sql::QueryInt(db, "PRAGMA user_version");
  if (!user_version.ok()) return fail(user_version.status());
  const bool rekeying = *user_version >= kRekeyVersionOffset;
  const std::int64_t schema_version = *user_version - (rekeying ? kRekeyVersionOffset : 0);
  if (schema_version != kSchemaVersion && schema_version != kStoredShareMacSchemaVersion) {
    const bool newer = schema_version > kStoredShareMacSchemaVersion;
    return fail(Status::Corruption(
        "client state schema version " + std::to_string(*user_version) +
        (newer ? " is newer than this build supports (" : " is not supported (this build reads ") +
        "versions " + std::to_string(kSchemaVersion) + " and " +
        std::to_string(kStoredShareMacSchemaVersion) + ")" +
        (newer ? "; use a newer s3oram"
         : *user_version == 1
             ? "; version 1 predates block encryption: create the filesystem again "
               "with s3oram init"
             : "")));
  }

  // Meta rows. Every expected key must be present with the right type.
  FsConfig& cfg = store->config_;
  {
    Stmt st;
    if (Status s = st.Prepare(db, "SELECT value FROM meta WHERE key = ?1"); !s.ok()) {
      return fail(s.WithContext("reading meta (tables missing?)"));
    }
    // Returns the integer value of `key`, or Corruption if absent / not an integer.
    auto get_int = [&st](const char* key) -> Result<std::int64_t> {
      st.Text(1, key);
      auto row = st.Step("reading meta");
      Result<std::int64_t> out = Status::Corruption(std::string("meta row '") + key + "' missing");
      if (!row.ok()) {
        out = row.status();
      } else if (*row) {
        if (sqlite3_column_type(st.get(), 0) == SQLITE_INTEGER) {
          out = static_cast<std::int64_t>(sqlite3_column_int64(st.get(), 0));
        } else {
          out = Status::Corruption(std::string("meta row '") + key + "' is not an integer");
        }
      }
      sqlite3_reset(st.get());
      return out;
    };
    auto schema = get_int("schema_version");
    if (!schema.ok()) return fail(schema.status());
    if (*schema != schema_version) {
      return fail(Status::Corruption("meta schema_version " + std::to_string(*schema) +
                                     " disagrees with the header's " +
                                     std::to_string(schema_version)));
    }
    store->schema_version_ = schema_version;
    for (const ParamField& f : kParamFields) {
      auto v = get_int(f.key);
      if (!v.ok()) return fail(v.status());
      if (f.u32) {
        if (*v < 0 || *v > std::int64_t{UINT32_MAX}) {
          return fail(Status::Corruption(std::string("meta row '") + f.key + "' value " +
                                         std::to_string(*v) + " out of range"));
        }
        cfg.params.*f.u32 = static_cast<std::uint32_t>(*v);
      } else {
        cfg.params.*f.u64 = FromSql(*v);
      }
    }
    // Optional: a state made before share MACs has no row and no tags.
    cfg.params.mac_elems = 0;
    if (auto mac = get_int("mac_elems"); mac.ok()) {
      if (*mac != 0 && *mac != std::int64_t{share_mac::kShareMacElems}) {
        return fail(Status::Corruption("meta row 'mac_elems' is " + std::to_string(*mac) +
                                       ", not 0 or " + std::to_string(share_mac::kShareMacElems)));
      }
      cfg.params.mac_elems = static_cast<std::uint32_t>(*mac);
    } else if (mac.status().message().find("missing") == std::string::npos) {
      return fail(mac.status());
    }
    auto unsafe = get_int("allow_unsafe");
    if (!unsafe.ok()) return fail(unsafe.status());
    if (*unsafe != 0 && *unsafe != 1) {
      return fail(Status::Corruption("meta row 'allow_unsafe' is " + std::to_string(*unsafe) +
                                     ", not 0 or 1"));
    }
    cfg.allow_unsafe = *unsafe == 1;

    st.Text(1, "fs_id");
    auto row = st.Step("reading meta");
    if (!row.ok()) return fail(row.status());
    if (!*row || sqlite3_column_type(st.get(), 0) != SQLITE_BLOB ||
        static_cast<std::size_t>(sqlite3_column_bytes(st.get(), 0)) != cfg.fs_id.size()) {
      return fail(Status::Corruption("meta row 'fs_id' missing or not a 16-byte blob"));
    }
    std::memcpy(cfg.fs_id.data(), sqlite3_column_blob(st.get(), 0), cfg.fs_id.size());
    sqlite3_reset(st.get());

    // The key wrap lives in the clear header (state_header.h), the fs id in
    // both: they must agree.
    cfg.key_wrap = store->state_->header().wrap;
    if (store->state_->header().fs_id != cfg.fs_id) {
      return fail(Status::Corruption(
          "the state header names another filesystem than the database inside it"));
    }
    st.Text(1, "client_key_file");
    auto key_row = st.Step("reading meta");
    if (!key_row.ok()) return fail(key_row.status());
    if (!*key_row || sqlite3_column_type(st.get(), 0) != SQLITE_TEXT) {
      return fail(Status::Corruption("meta row 'client_key_file' missing or not text"));
    }
    cfg.client_key_file.assign(reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0)),
                               static_cast<std::size_t>(sqlite3_column_bytes(st.get(), 0)));
    sqlite3_reset(st.get());
  }
  if (std::string problem = ParamsProblem(cfg.params); !problem.empty()) {
    return fail(Status::Corruption("stored parameters are invalid: " + problem));
  }

  // Servers: indices must be exactly 0..n-1.
  {
    Stmt st;
    S3ORAM_RETURN_IF_ERROR(
        fail(st.Prepare(db, "SELECT idx, endpoint, public_key FROM servers ORDER BY idx")));
    for (std::int64_t expect = 0;; ++expect) {
      auto row = st.Step("reading servers");
      if (!row.ok()) return fail(row.status());
      if (!*row) break;
      if (sqlite3_column_int64(st.get(), 0) != expect) {
        return fail(Status::Corruption("servers table is missing party index " +
                                       std::to_string(expect)));
      }
      const unsigned char* text = sqlite3_column_text(st.get(), 1);
      cfg.servers.emplace_back(text ? reinterpret_cast<const char*>(text) : "",
                               static_cast<std::size_t>(sqlite3_column_bytes(st.get(), 1)));
      const unsigned char* key = sqlite3_column_text(st.get(), 2);
      cfg.server_keys.emplace_back(key ? reinterpret_cast<const char*>(key) : "",
                                   static_cast<std::size_t>(sqlite3_column_bytes(st.get(), 2)));
      if (Status k = CheckZ85Key(cfg.server_keys.back(),
                                 "the stored public key of server " + std::to_string(expect));
          !k.ok()) {
        return fail(Status::Corruption(k.message()));
      }
    }
  }

  // Counters: exactly one row.
  {
    Stmt st;
    S3ORAM_RETURN_IF_ERROR(fail(st.Prepare(db, "SELECT nr, ne, seq, epoch FROM counters")));
    auto row = st.Step("reading counters");
    if (!row.ok()) return fail(row.status());
    if (!*row) return fail(Status::Corruption("counters row missing"));
    Counters& c = store->counters_;
    c.nr = FromSql(sqlite3_column_int64(st.get(), 0));
    c.ne = FromSql(sqlite3_column_int64(st.get(), 1));
    c.seq = FromSql(sqlite3_column_int64(st.get(), 2));
    c.epoch = FromSql(sqlite3_column_int64(st.get(), 3));
    store->durable_seq_ = c.seq;
    auto more = st.Step("reading counters");
    if (!more.ok()) return fail(more.status());
    if (*more) return fail(Status::Corruption("more than one counters row"));
  }
  // The eviction estimate (optional; absent in states older than it).
  {
    Stmt st;
    S3ORAM_RETURN_IF_ERROR(
        fail(st.Prepare(db, "SELECT value FROM meta WHERE key = 'eviction_estimate_ms'")));
    auto row = st.Step("reading the eviction estimate");
    if (!row.ok()) return fail(row.status());
    if (*row) {
      if (sqlite3_column_type(st.get(), 0) != SQLITE_INTEGER) {
        return fail(Status::Corruption("meta eviction_estimate_ms is not an integer"));
      }
      store->eviction_estimate_ms_ = FromSql(sqlite3_column_int64(st.get(), 0));
    }
  }
  // The backup mark: both rows or neither (a state from before marks).
  {
    Stmt st;
    S3ORAM_RETURN_IF_ERROR(fail(st.Prepare(
        db, "SELECT key, value FROM meta WHERE key IN ('backup_generation', 'backup_epoch')")));
    std::optional<std::uint64_t> generation, epoch;
    for (;;) {
      auto row = st.Step("reading the backup mark");
      if (!row.ok()) return fail(row.status());
      if (!*row) break;
      if (sqlite3_column_type(st.get(), 1) != SQLITE_INTEGER) {
        return fail(Status::Corruption("meta backup mark row is not an integer"));
      }
      const std::uint64_t v = FromSql(sqlite3_column_int64(st.get(), 1));
      const unsigned char* key = sqlite3_column_text(st.get(), 0);
      (key && std::strcmp(reinterpret_cast<const char*>(key), "backup_epoch") == 0 ? epoch
                                                                                    : generation) = v;
    }
    if (generation.has_value() != epoch.has_value()) {
      return fail(Status::Corruption("meta holds half a backup mark"));
    }
    if (generation) store->backup_mark_ = BackupMark{*generation, *epoch};
  }
  // The problem note (optional; the text is shown as it is).
  {
    Stmt st;
    S3ORAM_RETURN_IF_ERROR(fail(st.Prepare(
        db, "SELECT (SELECT value FROM meta WHERE key = 'problem_text'), "
            "(SELECT value FROM meta WHERE key = 'problem_unix'), "
            "(SELECT value FROM meta WHERE key = 'problem_damaged')")));
    auto row = st.Step("reading the problem note");
    if (!row.ok()) return fail(row.status());
    if (*row && sqlite3_column_type(st.get(), 0) == SQLITE_TEXT &&
        sqlite3_column_type(st.get(), 1) == SQLITE_INTEGER) {
      ProblemNote n;
      n.text.assign(reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0)),
                    static_cast<std::size_t>(sqlite3_column_bytes(st.get(), 0)));
      n.unix_seconds = FromSql(sqlite3_column_int64(st.get(), 1));
      n.damaged = sqlite3_column_type(st.get(), 2) == SQLITE_INTEGER &&
                  sqlite3_column_int64(st.get(), 2) != 0;
      store->problem_note_ = std::move(n);
    }
  }
  // The rotation under way: all four rows exactly when the header says so.
  {
    Stmt st;
    S3ORAM_RETURN_IF_ERROR(fail(st.Prepare(
        db, "SELECT (SELECT value FROM meta WHERE key = 'rekey_old_master'), "
            "(SELECT value FROM meta WHERE key = 'rekey_phase'), "
            "(SELECT value FROM meta WHERE key = 'rekey_next_block'), "
            "(SELECT value FROM meta WHERE key = 'rekey_purge_until')")));
    auto row = st.Step("reading the rekey progress");
    if (!row.ok()) return fail(row.status());
    sqlite3_stmt* s = st.get();
    int present = 0;
    for (int col = 0; col < 4; ++col) present += sqlite3_column_type(s, col) != SQLITE_NULL;
    if (!rekeying && present != 0) {
      return fail(Status::Corruption("meta holds rekey rows but the header records no rekey"));
    }
    if (rekeying) {
      if (present != 4 || sqlite3_column_type(s, 0) != SQLITE_BLOB ||
          sqlite3_column_bytes(s, 0) != static_cast<int>(kMasterKeyBytes) ||
          sqlite3_column_type(s, 1) != SQLITE_INTEGER ||
          sqlite3_column_type(s, 2) != SQLITE_INTEGER ||
          sqlite3_column_type(s, 3) != SQLITE_INTEGER) {
        return fail(Status::Corruption("the header records a rekey under way but the meta rows "
                                       "describing it are missing or malformed"));
      }
      const std::int64_t phase = sqlite3_column_int64(s, 1);
      if (phase != static_cast<std::int64_t>(RekeyProgress::Phase::kReseal) &&
          phase != static_cast<std::int64_t>(RekeyProgress::Phase::kPurge)) {
        return fail(Status::Corruption("meta rekey_phase " + std::to_string(phase) +
                                       " is not a phase"));
      }
      RekeyProgress r;
      r.phase = static_cast<RekeyProgress::Phase>(phase);
      r.next_block = FromSql(sqlite3_column_int64(s, 2));
      r.purge_until = FromSql(sqlite3_column_int64(s, 3));
      store->rekey_ = r;
      store->rekey_old_master_ = Secret::CopyOf(std::span(
          static_cast<const std::uint8_t*>(sqlite3_column_blob(s, 0)), kMasterKeyBytes));
    }
  }
  // The share MAC's secrets: stored exactly in version 3.
  {
    auto current = ReadShareMacRows(db, kShareMacPrefix);
    if (!current.ok()) return fail(current.status());
    if (current->has_value() != (schema_version == kStoredShareMacSchemaVersion)) {
      return fail(Status::Corruption("schema version " + std::to_string(schema_version) +
                                     (current->has_value()
                                          ? " holds share MAC secrets, which only version 3 has"
                                          : " lacks the share MAC secrets")));
    }
    store->share_mac_ = current->has_value() ? std::move(**current)
                                             : DeriveShareMacSecrets(store->state_->master());
    auto old = ReadShareMacRows(db, kOldShareMacPrefix);
    if (!old.ok()) return fail(old.status());
    if (old->has_value() && !rekeying) {
      return fail(Status::Corruption(
          "meta holds the share MAC secrets of a rotation but the header records no rekey"));
    }
    if (rekeying) {
      store->rekey_old_share_mac_ =
          old->has_value() ? std::move(**old) : DeriveShareMacSecrets(store->rekey_old_master_);
    }
  }
  // Touch the remaining tables so that a missing table fails Open, not a later
  // load. (Rows are validated when they are loaded.)
  for (const char* sql : {"SELECT 1 FROM positions LIMIT 1", "SELECT 1 FROM pending LIMIT 1"}) {
    Stmt st;
    S3ORAM_RETURN_IF_ERROR(fail(st.Prepare(db, sql)));
    auto row = st.Step(sql);
    if (!row.ok()) return fail(row.status());
  }

  // Only now that the file is known to be ours may anything be written.
  if (Status s = ConfigureConnection(db); !s.ok()) return fail(s);
  if (Status s = EnableWal(db); !s.ok()) return fail(s);
  store->db_ = std::exchange(db, nullptr);
  return store;
}

ClientStateStore::~ClientStateStore() {
  // close_v2 defers the close if a statement is somehow still alive instead
  // of failing; every Stmt is scoped, so this is the plain close.
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

Result<PositionMap> ClientStateStore::LoadPositionMap() const {
  const OramParams& p = config_.params;
  PositionMap map(p.geometry(), p.capacity_blocks);
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(
      st.Prepare(db_, "SELECT id, leaf, level, slot, version FROM positions ORDER BY id"));
  for (;;) {
    auto row = st.Step("reading positions");
    if (!row.ok()) return row.status().WithContext(path_);
    if (!*row) break;
    sqlite3_stmt* s = st.get();
    const BlockId id = FromSql(sqlite3_column_int64(s, 0));
    const std::int64_t leaf = sqlite3_column_int64(s, 1);
    const std::int64_t level = sqlite3_column_int64(s, 2);
    const std::int64_t slot = sqlite3_column_int64(s, 3);
    auto bad = [&](const std::string& why) {
      return Status::Corruption(path_ + ": position row id=" + std::to_string(id) + " (leaf " +
                                std::to_string(leaf) + ", level " + std::to_string(level) +
                                ", slot " + std::to_string(slot) + "): " + why);
    };
    for (int col = 1; col <= 4; ++col) {
      if (sqlite3_column_type(s, col) != SQLITE_INTEGER) return bad("non-integer column");
    }
    // Range-check before narrowing so a huge stored value cannot alias a valid one.
    if (leaf < 0 || level < 0 || level > std::int64_t{UINT32_MAX} || slot < 0 ||
        slot > std::int64_t{UINT32_MAX}) {
      return bad("value out of range");
    }
    Position pos{static_cast<LeafId>(leaf), static_cast<std::uint32_t>(level),
                 static_cast<std::uint32_t>(slot)};
    if (std::string problem = PositionProblem(p, id, pos); !problem.empty()) return bad(problem);
    Status placed = map.Place(id, pos, FromSql(sqlite3_column_int64(s, 4)));
    if (!placed.ok()) return bad(placed.message());
  }
  return map;
}

Result<std::vector<PendingOp>> ClientStateStore::LoadPending() const {
  std::vector<PendingOp> out;
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(st.Prepare(db_, "SELECT seq, kind, payload FROM pending ORDER BY seq"));
  for (;;) {
    auto row = st.Step("reading pending operations");
    if (!row.ok()) return row.status().WithContext(path_);
    if (!*row) break;
    sqlite3_stmt* s = st.get();
    PendingOp op;
    op.seq = FromSql(sqlite3_column_int64(s, 0));
    if (sqlite3_column_type(s, 1) != SQLITE_TEXT) {
      return Status::Corruption(path_ + ": pending row seq=" + std::to_string(op.seq) +
                                ": kind is not text");
    }
    const unsigned char* kind = sqlite3_column_text(s, 1);
    op.kind.assign(reinterpret_cast<const char*>(kind),
                   static_cast<std::size_t>(sqlite3_column_bytes(s, 1)));
    // column_blob before column_bytes, as SQLite documents, so the length
    // refers to the blob form of the value.
    const auto* blob = static_cast<const std::uint8_t*>(sqlite3_column_blob(s, 2));
    const auto n = static_cast<std::size_t>(sqlite3_column_bytes(s, 2));
    if (n != 0) op.payload.assign(blob, blob + n);
    out.push_back(std::move(op));
  }
  return out;
}

Status ClientStateStore::ReplaceKeyWrap(const KeyWrap& wrap) {
  S3ORAM_RETURN_IF_ERROR(ValidateKdfParams(wrap.kdf));
  if (Status s = state_->ReplaceKeyWrap(wrap); !s.ok()) {
    return s.WithContext(path_ + ": replacing the wrapped key");
  }
  // Durable in both header copies: from here on only the new passphrase opens it.
  config_.key_wrap = wrap;
  return Status::Ok();
}

Status ClientStateStore::ReplaceMachineConfig(const std::vector<std::string>& servers,
                                              const std::vector<std::string>& server_keys,
                                              const std::string& client_key_file) {
  if (servers.size() != config_.servers.size() || server_keys.size() != servers.size()) {
    return Status::InvalidArgument(
        path_ + ": the filesystem has " + std::to_string(config_.servers.size()) +
        " servers; give exactly that many endpoints and keys (got " +
        std::to_string(servers.size()) + " and " + std::to_string(server_keys.size()) + ")");
  }
  S3ORAM_RETURN_IF_ERROR(sql::Exec(db_, "PRAGMA synchronous = FULL"));
  auto apply = [&]() -> Status {
    S3ORAM_RETURN_IF_ERROR(sql::Exec(db_, "BEGIN IMMEDIATE"));
    Stmt srv;
    S3ORAM_RETURN_IF_ERROR(
        srv.Prepare(db_, "UPDATE servers SET endpoint = ?2, public_key = ?3 WHERE idx = ?1"));
    for (std::size_t i = 0; i < servers.size(); ++i) {
      srv.Int(1, static_cast<std::int64_t>(i));
      srv.Text(2, servers[i]);
      srv.Text(3, server_keys[i]);
      S3ORAM_RETURN_IF_ERROR(srv.Exec("rewriting servers"));
      if (sqlite3_changes(db_) != 1) {
        return Status::Corruption("servers table has no row for party " + std::to_string(i));
      }
    }
    Stmt meta;
    S3ORAM_RETURN_IF_ERROR(
        meta.Prepare(db_, "UPDATE meta SET value = ?1 WHERE key = 'client_key_file'"));
    meta.Text(1, client_key_file);
    S3ORAM_RETURN_IF_ERROR(meta.Exec("rewriting client_key_file"));
    if (sqlite3_changes(db_) != 1) return Status::Corruption("meta row 'client_key_file' missing");
    return sql::Exec(db_, "COMMIT");
  };
  Status s = apply();
  if (!s.ok() && !sqlite3_get_autocommit(db_)) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  (void)sql::Exec(db_, "PRAGMA synchronous = NORMAL");
  if (!s.ok()) return s.WithContext(path_ + ": rewriting the server addresses (nothing changed)");
  config_.servers = servers;
  config_.server_keys = server_keys;
  config_.client_key_file = client_key_file;
  return Status::Ok();
}

Status ClientStateStore::Commit(const Batch& batch, bool durable) {
  if (batch.empty()) return Status::Ok();
  // Reject entries that could never be loaded back before touching the
  // database: a stored position outside the tree would make the state
  // unopenable for the position map.
  for (const auto& [id, e] : batch.puts_) {
    if (std::string problem = PositionProblem(config_.params, id, e.pos); !problem.empty()) {
      return Status::InvalidArgument("commit: position for block " + std::to_string(id) + ": " +
                                     problem);
    }
  }

  if ((batch.rekey_progress_ || batch.end_rekey_) && !rekey_) {
    return Status::InvalidArgument("commit: the state records no rekey under way");
  }

  if (durable) S3ORAM_RETURN_IF_ERROR(sql::Exec(db_, "PRAGMA synchronous = FULL"));
  // The previous master key's cell is overwritten, not only unlinked.
  if (batch.end_rekey_) S3ORAM_RETURN_IF_ERROR(sql::Exec(db_, "PRAGMA secure_delete = ON"));

  // Order inside the transaction: erases before puts (so a batch that erases
  // and re-puts a block leaves it placed), pending removals before additions
  // (so a seq can be retired and reused in one batch), counters last.
  auto apply = [&]() -> Status {
    // IMMEDIATE takes the write lock now, so a competing writer makes us wait
    // (busy timeout) or fail here, not half-way through the batch.
    S3ORAM_RETURN_IF_ERROR(sql::Exec(db_, "BEGIN IMMEDIATE"));
    if (!batch.erases_.empty()) {
      Stmt st;
      S3ORAM_RETURN_IF_ERROR(st.Prepare(db_, "DELETE FROM positions WHERE id = ?1"));
      for (BlockId id : batch.erases_) {
        st.U64(1, id);
        S3ORAM_RETURN_IF_ERROR(st.Exec("erasing position"));
      }
    }
    if (!batch.puts_.empty()) {
      Stmt st;
      S3ORAM_RETURN_IF_ERROR(st.Prepare(
          db_,
          "INSERT INTO positions(id, leaf, level, slot, version) VALUES (?1, ?2, ?3, ?4, ?5) "
          "ON CONFLICT(id) DO UPDATE SET leaf = excluded.leaf, level = excluded.level, "
          "slot = excluded.slot, version = excluded.version"));
      for (const auto& [id, e] : batch.puts_) {
        st.U64(1, id);
        st.U64(2, e.pos.leaf);
        st.Int(3, e.pos.level);
        st.Int(4, e.pos.slot);
        st.U64(5, e.version);
        S3ORAM_RETURN_IF_ERROR(st.Exec("writing position"));
      }
    }
    if (!batch.remove_pending_.empty()) {
      Stmt st;
      S3ORAM_RETURN_IF_ERROR(st.Prepare(db_, "DELETE FROM pending WHERE seq = ?1"));
      for (std::uint64_t seq : batch.remove_pending_) {
        st.U64(1, seq);
        S3ORAM_RETURN_IF_ERROR(st.Exec("removing pending operation"));
      }
    }
    if (!batch.add_pending_.empty()) {
      Stmt st;
      // Plain INSERT: adding a seq that is already pending is a caller bug,
      // and the primary-key violation aborts the whole batch.
      S3ORAM_RETURN_IF_ERROR(
          st.Prepare(db_, "INSERT INTO pending(seq, kind, payload) VALUES (?1, ?2, ?3)"));
      for (const PendingOp& op : batch.add_pending_) {
        st.U64(1, op.seq);
        st.Text(2, op.kind);
        st.Blob(3, op.payload.data(), op.payload.size());
        S3ORAM_RETURN_IF_ERROR(st.Exec("adding pending operation"));
      }
    }
    if (batch.counters_) {
      const Counters& c = *batch.counters_;
      Stmt st;
      S3ORAM_RETURN_IF_ERROR(st.Prepare(
          db_, "UPDATE counters SET nr = ?1, ne = ?2, seq = ?3, epoch = ?4 WHERE id = 0"));
      st.U64(1, c.nr);
      st.U64(2, c.ne);
      st.U64(3, c.seq);
      st.U64(4, c.epoch);
      S3ORAM_RETURN_IF_ERROR(st.Exec("writing counters"));
      if (sqlite3_changes(db_) != 1) return Status::Corruption("counters row missing");
    }
    if (batch.backup_mark_) {
      Stmt st;
      S3ORAM_RETURN_IF_ERROR(st.Prepare(
          db_, "INSERT OR REPLACE INTO meta(key, value) VALUES ('backup_generation', ?1), "
               "('backup_epoch', ?2)"));
      st.U64(1, batch.backup_mark_->generation);
      st.U64(2, batch.backup_mark_->epoch);
      S3ORAM_RETURN_IF_ERROR(st.Exec("writing the backup mark"));
    }
    if (batch.eviction_estimate_ms_) {
      Stmt st;
      S3ORAM_RETURN_IF_ERROR(st.Prepare(
          db_, "INSERT OR REPLACE INTO meta(key, value) VALUES ('eviction_estimate_ms', ?1)"));
      st.U64(1, *batch.eviction_estimate_ms_);
      S3ORAM_RETURN_IF_ERROR(st.Exec("writing the eviction estimate"));
    }
    if (batch.problem_note_) {
      S3ORAM_RETURN_IF_ERROR(sql::Exec(
          db_, "DELETE FROM meta WHERE key IN ('problem_text', 'problem_unix', 'problem_damaged')"));
      if (const auto& n = *batch.problem_note_) {
        Stmt st;
        S3ORAM_RETURN_IF_ERROR(st.Prepare(
            db_, "INSERT INTO meta(key, value) VALUES ('problem_text', ?1), ('problem_unix', ?2), "
                 "('problem_damaged', ?3)"));
        st.Text(1, n->text);
        st.U64(2, n->unix_seconds);
        st.U64(3, n->damaged ? 1 : 0);
        S3ORAM_RETURN_IF_ERROR(st.Exec("writing the problem note"));
      }
    }
    if (batch.rekey_progress_) {
      const RekeyProgress& r = *batch.rekey_progress_;
      Stmt st;
      S3ORAM_RETURN_IF_ERROR(st.Prepare(
          db_, "INSERT OR REPLACE INTO meta(key, value) VALUES ('rekey_phase', ?1), "
               "('rekey_next_block', ?2), ('rekey_purge_until', ?3)"));
      st.Int(1, static_cast<std::int64_t>(r.phase));
      st.U64(2, r.next_block);
      st.U64(3, r.purge_until);
      S3ORAM_RETURN_IF_ERROR(st.Exec("writing the rekey progress"));
    }
    if (batch.end_rekey_) {
      S3ORAM_RETURN_IF_ERROR(
          sql::Exec(db_,
                    "DELETE FROM meta WHERE key IN ('rekey_old_master', 'rekey_phase', "
                    "'rekey_next_block', 'rekey_purge_until', 'rekey_old_share_mac_half0', "
                    "'rekey_old_share_mac_half1', 'rekey_old_share_mac_last_replaced')"));
      const std::string version = "PRAGMA user_version = " + std::to_string(schema_version_);
      S3ORAM_RETURN_IF_ERROR(sql::Exec(db_, version.c_str()));
    }
    FaultPoint("state.commit.before");
    S3ORAM_RETURN_IF_ERROR(sql::Exec(db_, "COMMIT"));
    FaultPoint("state.commit.after");
    return Status::Ok();
  };

  Status s = apply();
  if (!s.ok() && !sqlite3_get_autocommit(db_)) {
    // Some errors (SQLITE_FULL, I/O errors) already rolled the transaction
    // back; get_autocommit tells whether one is still open.
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  if (batch.end_rekey_) (void)sql::Exec(db_, "PRAGMA secure_delete = OFF");
  if (durable) {
    // Failing to lower it again only costs speed (commits stay durable), and
    // reporting it would make a committed batch look failed.
    (void)sql::Exec(db_, "PRAGMA synchronous = NORMAL");
  }
  if (!s.ok()) return s.WithContext(path_ + ": commit");
  // Only a committed batch moves the in-memory counters, so they always equal
  // what a fresh Open would read.
  if (batch.counters_) counters_ = *batch.counters_;
  // A FULL commit syncs the log, and with it every commit before it.
  if (durable) durable_seq_ = counters_.seq;
  if (batch.backup_mark_) backup_mark_ = batch.backup_mark_;
  if (batch.problem_note_) problem_note_ = *batch.problem_note_;
  if (batch.eviction_estimate_ms_) eviction_estimate_ms_ = *batch.eviction_estimate_ms_;
  if (batch.rekey_progress_) rekey_ = batch.rekey_progress_;
  if (batch.end_rekey_) {
    rekey_.reset();
    rekey_old_master_ = Secret();
    rekey_old_share_mac_.reset();
  }
  return Status::Ok();
}

Status WriteRekeyStart(sqlite3* db, const Secret& old_master) {
  if (old_master.size() != kMasterKeyBytes) {
    return Status::InvalidArgument("rekey: the previous master key has the wrong size");
  }
  // The share MAC: one half replaced, the pair before kept for the rotation
  // (crypto/share_mac_secrets.h).
  S3ORAM_ASSIGN_OR_RETURN(std::optional<ShareMacSecrets> stored,
                          ReadShareMacRows(db, kShareMacPrefix));
  const ShareMacSecrets previous = stored ? std::move(*stored) : DeriveShareMacSecrets(old_master);
  S3ORAM_RETURN_IF_ERROR(WriteShareMacRows(db, kOldShareMacPrefix, previous));
  S3ORAM_RETURN_IF_ERROR(WriteShareMacRows(db, kShareMacPrefix, RotateShareMacSecrets(previous)));
  S3ORAM_RETURN_IF_ERROR(
      sql::Exec(db, ("UPDATE meta SET value = " + std::to_string(kStoredShareMacSchemaVersion) +
                     " WHERE key = 'schema_version'")
                        .c_str()));
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(st.Prepare(
      db, "INSERT OR REPLACE INTO meta(key, value) VALUES ('rekey_old_master', ?1), "
          "('rekey_phase', ?2), ('rekey_next_block', 0), ('rekey_purge_until', 0)"));
  st.Blob(1, old_master.data(), old_master.size());
  st.Int(2, static_cast<std::int64_t>(RekeyProgress::Phase::kReseal));
  S3ORAM_RETURN_IF_ERROR(st.Exec("writing the rekey start"));
  const std::string version =
      "PRAGMA user_version = " + std::to_string(kRekeyVersionOffset + kStoredShareMacSchemaVersion);
  return sql::Exec(db, version.c_str());
}

}  // namespace s3oram

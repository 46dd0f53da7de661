// ClientStateStore::Open and the loads (see client_state.h; the file format
// is described in client_state.cpp): every row is checked as it is read, and
// nothing is written until the file is known to be an s3oram state of a
// version this build reads.
#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <span>
#include <utility>

#include "oramcore/crypto/curve_keys.h"
#include "oramcore/crypto/share_mac_secrets.h"
#include "oramcore/math/share_mac.h"
#include "oramcore/state/client_state.h"
#include "oramcore/state/client_state_internal.h"
#include "oramcore/state/sql.h"

namespace s3oram {

using namespace client_state_internal;

// Counters: exactly one row.
Status ClientStateStore::ReadCounters(sqlite3* db) {
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(st.Prepare(db, "SELECT nr, ne, seq, epoch FROM counters"));
  auto row = st.Step("reading counters");
  if (!row.ok()) return row.status();
  if (!*row) return Status::Corruption("counters row missing");
  Counters& c = counters_;
  c.nr = FromSql(sqlite3_column_int64(st.get(), 0));
  c.ne = FromSql(sqlite3_column_int64(st.get(), 1));
  c.seq = FromSql(sqlite3_column_int64(st.get(), 2));
  c.epoch = FromSql(sqlite3_column_int64(st.get(), 3));
  durable_seq_ = c.seq;
  auto more = st.Step("reading counters");
  if (!more.ok()) return more.status();
  if (*more) return Status::Corruption("more than one counters row");
  return Status::Ok();
}

// Meta rows. Every expected key must be present with the right type.
Status ClientStateStore::ReadMeta(sqlite3* db, std::int64_t schema_version) {
  FsConfig& cfg = config_;
  Stmt st;
  if (Status s = st.Prepare(db, "SELECT value FROM meta WHERE key = ?1"); !s.ok()) {
    return s.WithContext("reading meta (tables missing?)");
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
  if (!schema.ok()) return schema.status();
  if (*schema != schema_version) {
    return Status::Corruption("meta schema_version " + std::to_string(*schema) +
                              " disagrees with the header's " + std::to_string(schema_version));
  }
  schema_version_ = schema_version;
  for (const ParamField& f : kParamFields) {
    auto v = get_int(f.key);
    if (!v.ok()) return v.status();
    if (f.u32) {
      if (*v < 0 || *v > std::int64_t{UINT32_MAX}) {
        return Status::Corruption(std::string("meta row '") + f.key + "' value " +
                                  std::to_string(*v) + " out of range");
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
      return Status::Corruption("meta row 'mac_elems' is " + std::to_string(*mac) + ", not 0 or " +
                                std::to_string(share_mac::kShareMacElems));
    }
    cfg.params.mac_elems = static_cast<std::uint32_t>(*mac);
  } else if (mac.status().message().find("missing") == std::string::npos) {
    return mac.status();
  }
  auto unsafe = get_int("allow_unsafe");
  if (!unsafe.ok()) return unsafe.status();
  if (*unsafe != 0 && *unsafe != 1) {
    return Status::Corruption("meta row 'allow_unsafe' is " + std::to_string(*unsafe) +
                              ", not 0 or 1");
  }
  cfg.allow_unsafe = *unsafe == 1;

  st.Text(1, "fs_id");
  auto row = st.Step("reading meta");
  if (!row.ok()) return row.status();
  if (!*row || sqlite3_column_type(st.get(), 0) != SQLITE_BLOB ||
      static_cast<std::size_t>(sqlite3_column_bytes(st.get(), 0)) != cfg.fs_id.size()) {
    return Status::Corruption("meta row 'fs_id' missing or not a 16-byte blob");
  }
  std::memcpy(cfg.fs_id.data(), sqlite3_column_blob(st.get(), 0), cfg.fs_id.size());
  sqlite3_reset(st.get());

  // The key wrap lives in the clear header (state_header.h), the fs id in
  // both: they must agree.
  cfg.key_wrap = state_->header().wrap;
  if (state_->header().fs_id != cfg.fs_id) {
    return Status::Corruption(
        "the state header names another filesystem than the database inside it");
  }
  st.Text(1, "client_key_file");
  auto key_row = st.Step("reading meta");
  if (!key_row.ok()) return key_row.status();
  if (!*key_row || sqlite3_column_type(st.get(), 0) != SQLITE_TEXT) {
    return Status::Corruption("meta row 'client_key_file' missing or not text");
  }
  cfg.client_key_file.assign(reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0)),
                             static_cast<std::size_t>(sqlite3_column_bytes(st.get(), 0)));
  sqlite3_reset(st.get());
  if (std::string problem = ParamsProblem(cfg.params); !problem.empty()) {
    return Status::Corruption("stored parameters are invalid: " + problem);
  }
  return Status::Ok();
}

// Servers: indices must be exactly 0..n-1.
Status ClientStateStore::ReadServers(sqlite3* db) {
  FsConfig& cfg = config_;
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(
      st.Prepare(db, "SELECT idx, endpoint, public_key FROM servers ORDER BY idx"));
  for (std::int64_t expect = 0;; ++expect) {
    auto row = st.Step("reading servers");
    if (!row.ok()) return row.status();
    if (!*row) break;
    if (sqlite3_column_int64(st.get(), 0) != expect) {
      return Status::Corruption("servers table is missing party index " + std::to_string(expect));
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
      return Status::Corruption(k.message());
    }
  }
  return Status::Ok();
}

// The eviction estimate (optional; absent in states older than it).
Status ClientStateStore::ReadEvictionEstimate(sqlite3* db) {
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(
      st.Prepare(db, "SELECT value FROM meta WHERE key = 'eviction_estimate_ms'"));
  auto row = st.Step("reading the eviction estimate");
  if (!row.ok()) return row.status();
  if (*row) {
    if (sqlite3_column_type(st.get(), 0) != SQLITE_INTEGER) {
      return Status::Corruption("meta eviction_estimate_ms is not an integer");
    }
    eviction_estimate_ms_ = FromSql(sqlite3_column_int64(st.get(), 0));
  }
  return Status::Ok();
}

// The backup mark: both rows or neither (a state from before marks).
Status ClientStateStore::ReadBackupMark(sqlite3* db) {
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(st.Prepare(
      db, "SELECT key, value FROM meta WHERE key IN ('backup_generation', 'backup_epoch')"));
  std::optional<std::uint64_t> generation, epoch;
  for (;;) {
    auto row = st.Step("reading the backup mark");
    if (!row.ok()) return row.status();
    if (!*row) break;
    if (sqlite3_column_type(st.get(), 1) != SQLITE_INTEGER) {
      return Status::Corruption("meta backup mark row is not an integer");
    }
    const std::uint64_t v = FromSql(sqlite3_column_int64(st.get(), 1));
    const unsigned char* key = sqlite3_column_text(st.get(), 0);
    (key && std::strcmp(reinterpret_cast<const char*>(key), "backup_epoch") == 0 ? epoch
                                                                                 : generation) = v;
  }
  if (generation.has_value() != epoch.has_value()) {
    return Status::Corruption("meta holds half a backup mark");
  }
  if (generation) backup_mark_ = BackupMark{*generation, *epoch};
  return Status::Ok();
}

// The problem note (optional; the text is shown as it is).
Status ClientStateStore::ReadProblemNote(sqlite3* db) {
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(st.Prepare(db,
                                    "SELECT (SELECT value FROM meta WHERE key = 'problem_text'), "
                                    "(SELECT value FROM meta WHERE key = 'problem_unix'), "
                                    "(SELECT value FROM meta WHERE key = 'problem_damaged')"));
  auto row = st.Step("reading the problem note");
  if (!row.ok()) return row.status();
  if (*row && sqlite3_column_type(st.get(), 0) == SQLITE_TEXT &&
      sqlite3_column_type(st.get(), 1) == SQLITE_INTEGER) {
    ProblemNote n;
    n.text.assign(reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0)),
                  static_cast<std::size_t>(sqlite3_column_bytes(st.get(), 0)));
    n.unix_seconds = FromSql(sqlite3_column_int64(st.get(), 1));
    n.damaged = sqlite3_column_type(st.get(), 2) == SQLITE_INTEGER &&
                sqlite3_column_int64(st.get(), 2) != 0;
    problem_note_ = std::move(n);
  }
  return Status::Ok();
}

// Every excluded server's three rows (and its optional suspect mark); a
// server beyond the filesystem's, or a record missing a row, makes the file
// invalid.
Status ClientStateStore::ReadExclusions(sqlite3* db) {
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(st.Prepare(
      db,
      "SELECT s.key, s.value, (SELECT value FROM meta WHERE key = 'excluded_unix_' || "
      "substr(s.key, 16)), (SELECT value FROM meta WHERE key = 'excluded_reason_' || "
      "substr(s.key, 16)), (SELECT value FROM meta WHERE key = 'excluded_suspect_' || "
      "substr(s.key, 16)) FROM meta AS s WHERE s.key LIKE 'excluded\\_since\\_%' ESCAPE '\\' "
      "ORDER BY s.key"));
  Status err;
  while (st.Next(&err, "reading the exclusions")) {
    const std::string key = st.ColumnBytes(0);
    const std::string index = key.substr(15);
    std::uint64_t server = 0;
    bool number = !index.empty() && index.size() <= 2;
    for (char c : index) {
      number = number && c >= '0' && c <= '9';
      if (number) server = server * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (!number || server >= config_.params.parties || st.ColumnType(1) != SQLITE_INTEGER ||
        st.ColumnType(2) != SQLITE_INTEGER || st.ColumnType(3) != SQLITE_TEXT ||
        (st.ColumnType(4) != SQLITE_NULL &&
         (st.ColumnType(4) != SQLITE_INTEGER || st.ColumnU64(4) != 1))) {
      return Status::Corruption("client state: malformed exclusion record '" + key + "'");
    }
    Exclusion e;
    e.server = static_cast<std::uint32_t>(server);
    e.since_eviction = st.ColumnU64(1);
    e.unix_seconds = st.ColumnU64(2);
    e.reason = st.ColumnBytes(3);
    e.suspect = st.ColumnType(4) == SQLITE_INTEGER;
    exclusions_.push_back(std::move(e));
  }
  if (!err.ok()) return err;
  std::sort(exclusions_.begin(), exclusions_.end(),
            [](const Exclusion& a, const Exclusion& b) { return a.server < b.server; });
  return Status::Ok();
}

// The rotation under way: all four rows exactly when the header says so.
Status ClientStateStore::ReadRekey(sqlite3* db, bool rekeying) {
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(
      st.Prepare(db,
                 "SELECT (SELECT value FROM meta WHERE key = 'rekey_old_master'), "
                 "(SELECT value FROM meta WHERE key = 'rekey_phase'), "
                 "(SELECT value FROM meta WHERE key = 'rekey_next_block'), "
                 "(SELECT value FROM meta WHERE key = 'rekey_purge_until')"));
  auto row = st.Step("reading the rekey progress");
  if (!row.ok()) return row.status();
  sqlite3_stmt* s = st.get();
  int present = 0;
  for (int col = 0; col < 4; ++col) present += sqlite3_column_type(s, col) != SQLITE_NULL;
  if (!rekeying && present != 0) {
    return Status::Corruption("meta holds rekey rows but the header records no rekey");
  }
  if (rekeying) {
    if (present != 4 || sqlite3_column_type(s, 0) != SQLITE_BLOB ||
        sqlite3_column_bytes(s, 0) != static_cast<int>(kMasterKeyBytes) ||
        sqlite3_column_type(s, 1) != SQLITE_INTEGER ||
        sqlite3_column_type(s, 2) != SQLITE_INTEGER ||
        sqlite3_column_type(s, 3) != SQLITE_INTEGER) {
      return Status::Corruption(
          "the header records a rekey under way but the meta rows "
          "describing it are missing or malformed");
    }
    const std::int64_t phase = sqlite3_column_int64(s, 1);
    if (phase != static_cast<std::int64_t>(RekeyProgress::Phase::kReseal) &&
        phase != static_cast<std::int64_t>(RekeyProgress::Phase::kPurge)) {
      return Status::Corruption("meta rekey_phase " + std::to_string(phase) + " is not a phase");
    }
    RekeyProgress r;
    r.phase = static_cast<RekeyProgress::Phase>(phase);
    r.next_block = FromSql(sqlite3_column_int64(s, 2));
    r.purge_until = FromSql(sqlite3_column_int64(s, 3));
    rekey_ = r;
    rekey_old_master_ = Secret::CopyOf(
        std::span(static_cast<const std::uint8_t*>(sqlite3_column_blob(s, 0)), kMasterKeyBytes));
  }
  return Status::Ok();
}

// The share MAC's secrets: stored exactly in version 3.
Status ClientStateStore::ReadShareMacSecrets(sqlite3* db, bool rekeying,
                                             std::int64_t schema_version) {
  auto current = ReadShareMacRows(db, kShareMacPrefix);
  if (!current.ok()) return current.status();
  if (current->has_value() != (schema_version == kStoredShareMacSchemaVersion)) {
    return Status::Corruption("schema version " + std::to_string(schema_version) +
                              (current->has_value()
                                   ? " holds share MAC secrets, which only version 3 has"
                                   : " lacks the share MAC secrets"));
  }
  share_mac_ =
      current->has_value() ? std::move(**current) : DeriveShareMacSecrets(state_->master());
  auto old = ReadShareMacRows(db, kOldShareMacPrefix);
  if (!old.ok()) return old.status();
  if (old->has_value() && !rekeying) {
    return Status::Corruption(
        "meta holds the share MAC secrets of a rotation but the header records no rekey");
  }
  if (rekeying) {
    rekey_old_share_mac_ =
        old->has_value() ? std::move(**old) : DeriveShareMacSecrets(rekey_old_master_);
  }
  return Status::Ok();
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

  // Every row, each kind checked as it is read (the Read* steps).
  if (Status s = store->ReadMeta(db, schema_version); !s.ok()) return fail(s);
  if (Status s = store->ReadServers(db); !s.ok()) return fail(s);
  if (Status s = store->ReadCounters(db); !s.ok()) return fail(s);
  if (Status s = store->ReadEvictionEstimate(db); !s.ok()) return fail(s);
  if (Status s = store->ReadBackupMark(db); !s.ok()) return fail(s);
  if (Status s = store->ReadProblemNote(db); !s.ok()) return fail(s);
  if (Status s = store->ReadExclusions(db); !s.ok()) return fail(s);
  if (Status s = store->ReadRekey(db, rekeying); !s.ok()) return fail(s);
  if (Status s = store->ReadShareMacSecrets(db, rekeying, schema_version); !s.ok()) {
    return fail(s);
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

}  // namespace s3oram

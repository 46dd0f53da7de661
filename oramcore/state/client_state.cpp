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
//                                       per excluded server i (Exclusion):
//                                       excluded_since_<i>, excluded_unix_<i>,
//                                       excluded_reason_<i> (TEXT), all three
//                                       or none, and excluded_suspect_<i>
//                                       (1; absent: 0, and in states older
//                                       than it);
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

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <span>
#include <utility>

#include "oramcore/base/fault_point.h"
#include "oramcore/crypto/curve_keys.h"
#include "oramcore/crypto/share_mac_secrets.h"
#include "oramcore/math/share_mac.h"
#include "oramcore/state/client_state_internal.h"
#include "oramcore/state/sql.h"

namespace s3oram {

using namespace client_state_internal;

bool ClientStateStore::Batch::empty() const {
  return !counters_ && puts_.empty() && erases_.empty() && add_pending_.empty() &&
         remove_pending_.empty() && !backup_mark_ && !problem_note_ && !eviction_estimate_ms_ &&
         exclude_.empty() && readmit_.empty() && !rekey_progress_ && !end_rekey_;
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

namespace {

// Commit's writes, each inside its transaction (an error leaves the rollback
// to Commit).

// Erases before puts, so that a batch that erases and re-puts a block leaves
// it placed.
Status WritePositions(sqlite3* db, const std::vector<BlockId>& erases,
                      const std::vector<std::pair<BlockId, PositionEntry>>& puts) {
  if (!erases.empty()) {
    Stmt st;
    S3ORAM_RETURN_IF_ERROR(st.Prepare(db, "DELETE FROM positions WHERE id = ?1"));
    for (BlockId id : erases) {
      st.U64(1, id);
      S3ORAM_RETURN_IF_ERROR(st.Exec("erasing position"));
    }
  }
  if (!puts.empty()) {
    Stmt st;
    S3ORAM_RETURN_IF_ERROR(st.Prepare(
        db,
        "INSERT INTO positions(id, leaf, level, slot, version) VALUES (?1, ?2, ?3, ?4, ?5) "
        "ON CONFLICT(id) DO UPDATE SET leaf = excluded.leaf, level = excluded.level, "
        "slot = excluded.slot, version = excluded.version"));
    for (const auto& [id, e] : puts) {
      st.U64(1, id);
      st.U64(2, e.pos.leaf);
      st.Int(3, e.pos.level);
      st.Int(4, e.pos.slot);
      st.U64(5, e.version);
      S3ORAM_RETURN_IF_ERROR(st.Exec("writing position"));
    }
  }
  return Status::Ok();
}

// Removals before additions, so that a seq can be retired and reused in one
// batch.
Status WritePending(sqlite3* db, const std::vector<std::uint64_t>& remove,
                    const std::vector<PendingOp>& add) {
  if (!remove.empty()) {
    Stmt st;
    S3ORAM_RETURN_IF_ERROR(st.Prepare(db, "DELETE FROM pending WHERE seq = ?1"));
    for (std::uint64_t seq : remove) {
      st.U64(1, seq);
      S3ORAM_RETURN_IF_ERROR(st.Exec("removing pending operation"));
    }
  }
  if (!add.empty()) {
    Stmt st;
    // Plain INSERT: adding a seq that is already pending is a caller bug,
    // and the primary-key violation aborts the whole batch.
    S3ORAM_RETURN_IF_ERROR(
        st.Prepare(db, "INSERT INTO pending(seq, kind, payload) VALUES (?1, ?2, ?3)"));
    for (const PendingOp& op : add) {
      st.U64(1, op.seq);
      st.Text(2, op.kind);
      st.Blob(3, op.payload.data(), op.payload.size());
      S3ORAM_RETURN_IF_ERROR(st.Exec("adding pending operation"));
    }
  }
  return Status::Ok();
}

Status WriteCounters(sqlite3* db, const Counters& c) {
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(
      st.Prepare(db, "UPDATE counters SET nr = ?1, ne = ?2, seq = ?3, epoch = ?4 WHERE id = 0"));
  st.U64(1, c.nr);
  st.U64(2, c.ne);
  st.U64(3, c.seq);
  st.U64(4, c.epoch);
  S3ORAM_RETURN_IF_ERROR(st.Exec("writing counters"));
  if (sqlite3_changes(db) != 1) return Status::Corruption("counters row missing");
  return Status::Ok();
}

Status WriteBackupMark(sqlite3* db, const BackupMark& mark) {
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(
      st.Prepare(db,
                 "INSERT OR REPLACE INTO meta(key, value) VALUES ('backup_generation', ?1), "
                 "('backup_epoch', ?2)"));
  st.U64(1, mark.generation);
  st.U64(2, mark.epoch);
  return st.Exec("writing the backup mark");
}

Status WriteEvictionEstimate(sqlite3* db, std::uint64_t ms) {
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(st.Prepare(
      db, "INSERT OR REPLACE INTO meta(key, value) VALUES ('eviction_estimate_ms', ?1)"));
  st.U64(1, ms);
  return st.Exec("writing the eviction estimate");
}

// Replaces the note, or (nullopt) clears it.
Status WriteProblemNote(sqlite3* db, const std::optional<ProblemNote>& note) {
  S3ORAM_RETURN_IF_ERROR(sql::Exec(
      db, "DELETE FROM meta WHERE key IN ('problem_text', 'problem_unix', 'problem_damaged')"));
  if (const auto& n = note) {
    Stmt st;
    S3ORAM_RETURN_IF_ERROR(st.Prepare(
        db,
        "INSERT INTO meta(key, value) VALUES ('problem_text', ?1), ('problem_unix', ?2), "
        "('problem_damaged', ?3)"));
    st.Text(1, n->text);
    st.U64(2, n->unix_seconds);
    st.U64(3, n->damaged ? 1 : 0);
    S3ORAM_RETURN_IF_ERROR(st.Exec("writing the problem note"));
  }
  return Status::Ok();
}

// The meta keys of server i's exclusion.
std::string ExclusionKey(const char* what, std::uint32_t server) {
  return std::string("excluded_") + what + "_" + std::to_string(server);
}

Status DeleteExclusion(sqlite3* db, std::uint32_t server) {
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(st.Prepare(db, "DELETE FROM meta WHERE key IN (?1, ?2, ?3, ?4)"));
  st.Text(1, ExclusionKey("since", server));
  st.Text(2, ExclusionKey("unix", server));
  st.Text(3, ExclusionKey("reason", server));
  st.Text(4, ExclusionKey("suspect", server));
  return st.Exec("removing an exclusion");
}

Status WriteExclusion(sqlite3* db, const Exclusion& e) {
  S3ORAM_RETURN_IF_ERROR(DeleteExclusion(db, e.server));
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(
      st.Prepare(db, "INSERT INTO meta(key, value) VALUES (?1, ?2), (?3, ?4), (?5, ?6)"));
  st.Text(1, ExclusionKey("since", e.server));
  st.U64(2, e.since_eviction);
  st.Text(3, ExclusionKey("unix", e.server));
  st.U64(4, e.unix_seconds);
  st.Text(5, ExclusionKey("reason", e.server));
  st.Text(6, e.reason);
  S3ORAM_RETURN_IF_ERROR(st.Exec("writing an exclusion"));
  if (!e.suspect) return Status::Ok();
  Stmt suspect;
  S3ORAM_RETURN_IF_ERROR(suspect.Prepare(db, "INSERT INTO meta(key, value) VALUES (?1, 1)"));
  suspect.Text(1, ExclusionKey("suspect", e.server));
  return suspect.Exec("writing an exclusion");
}

Status WriteRekeyProgress(sqlite3* db, const RekeyProgress& r) {
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(
      st.Prepare(db,
                 "INSERT OR REPLACE INTO meta(key, value) VALUES ('rekey_phase', ?1), "
                 "('rekey_next_block', ?2), ('rekey_purge_until', ?3)"));
  st.Int(1, static_cast<std::int64_t>(r.phase));
  st.U64(2, r.next_block);
  st.U64(3, r.purge_until);
  return st.Exec("writing the rekey progress");
}

// Drops the rotation's rows (the previous master key's cell overwritten:
// Commit turned secure_delete on) and puts the schema marker back.
Status WriteRekeyEnd(sqlite3* db, std::int64_t schema_version) {
  S3ORAM_RETURN_IF_ERROR(
      sql::Exec(db,
                "DELETE FROM meta WHERE key IN ('rekey_old_master', 'rekey_phase', "
                "'rekey_next_block', 'rekey_purge_until', 'rekey_old_share_mac_half0', "
                "'rekey_old_share_mac_half1', 'rekey_old_share_mac_last_replaced')"));
  const std::string version = "PRAGMA user_version = " + std::to_string(schema_version);
  return sql::Exec(db, version.c_str());
}

}  // namespace

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

  for (const Exclusion& e : batch.exclude_) {
    if (e.server >= config_.params.parties) {
      return Status::InvalidArgument("commit: exclusion of server " + std::to_string(e.server) +
                                     " of " + std::to_string(config_.params.parties));
    }
  }
  if ((batch.rekey_progress_ || batch.end_rekey_) && !rekey_) {
    return Status::InvalidArgument("commit: the state records no rekey under way");
  }

  if (durable) S3ORAM_RETURN_IF_ERROR(sql::Exec(db_, "PRAGMA synchronous = FULL"));
  // The previous master key's cell is overwritten, not only unlinked.
  if (batch.end_rekey_) S3ORAM_RETURN_IF_ERROR(sql::Exec(db_, "PRAGMA secure_delete = ON"));

  // Order inside the transaction: positions, then pending operations, then
  // counters, then the meta rows (each step orders its own rows).
  auto apply = [&]() -> Status {
    // IMMEDIATE takes the write lock now, so a competing writer makes us wait
    // (busy timeout) or fail here, not half-way through the batch.
    S3ORAM_RETURN_IF_ERROR(sql::Exec(db_, "BEGIN IMMEDIATE"));
    S3ORAM_RETURN_IF_ERROR(WritePositions(db_, batch.erases_, batch.puts_));
    S3ORAM_RETURN_IF_ERROR(WritePending(db_, batch.remove_pending_, batch.add_pending_));
    if (batch.counters_) S3ORAM_RETURN_IF_ERROR(WriteCounters(db_, *batch.counters_));
    if (batch.backup_mark_) S3ORAM_RETURN_IF_ERROR(WriteBackupMark(db_, *batch.backup_mark_));
    if (batch.eviction_estimate_ms_) {
      S3ORAM_RETURN_IF_ERROR(WriteEvictionEstimate(db_, *batch.eviction_estimate_ms_));
    }
    if (batch.problem_note_) S3ORAM_RETURN_IF_ERROR(WriteProblemNote(db_, *batch.problem_note_));
    for (std::uint32_t server : batch.readmit_) {
      S3ORAM_RETURN_IF_ERROR(DeleteExclusion(db_, server));
    }
    for (const Exclusion& e : batch.exclude_) S3ORAM_RETURN_IF_ERROR(WriteExclusion(db_, e));
    if (batch.rekey_progress_) {
      S3ORAM_RETURN_IF_ERROR(WriteRekeyProgress(db_, *batch.rekey_progress_));
    }
    if (batch.end_rekey_) S3ORAM_RETURN_IF_ERROR(WriteRekeyEnd(db_, schema_version_));
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
  for (std::uint32_t server : batch.readmit_) {
    std::erase_if(exclusions_, [&](const Exclusion& e) { return e.server == server; });
  }
  for (const Exclusion& e : batch.exclude_) {
    std::erase_if(exclusions_, [&](const Exclusion& x) { return x.server == e.server; });
    exclusions_.push_back(e);
  }
  std::sort(exclusions_.begin(), exclusions_.end(),
            [](const Exclusion& a, const Exclusion& b) { return a.server < b.server; });
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

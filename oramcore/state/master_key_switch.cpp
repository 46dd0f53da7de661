#include "oramcore/state/master_key_switch.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oramcore/base/durable_file.h"
#include "oramcore/base/fault_point.h"
#include "oramcore/state/client_state.h"
#include "oramcore/state/sql.h"

namespace s3oram {
namespace {

struct Db {
  sqlite3* db = nullptr;
  ~Db() {
    if (db != nullptr) sqlite3_close_v2(db);
  }
};

bool NonEmpty(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && st.st_size > 0;
}

// The copy at `tmp`, sealed under `new_master`, its rotation recorded.
Status WriteRekeyedCopy(UnlockedState& from, const StateHeader& header, const Secret& new_master,
                        const std::string& tmp) {
  S3ORAM_ASSIGN_OR_RETURN(auto created,
                          UnlockedState::Create(tmp, header, Secret::CopyOf(new_master.bytes())));
  Db out;
  S3ORAM_ASSIGN_OR_RETURN(out.db, created->OpenDatabase());
  {
    Db in;
    S3ORAM_ASSIGN_OR_RETURN(in.db, from.OpenDatabase());
    sqlite3_backup* b = sqlite3_backup_init(out.db, "main", in.db, "main");
    if (b == nullptr)
      return Status::IoError("copying " + from.path() + ": " + sqlite3_errmsg(out.db));
    const int rc = sqlite3_backup_step(b, -1);
    const int finish = sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE || finish != SQLITE_OK) {
      std::string why = created->vfs().last_error();
      if (why.empty()) why = from.vfs().last_error();
      if (why.empty()) why = sqlite3_errstr(rc != SQLITE_DONE ? rc : finish);
      return Status::IoError("copying " + from.path() + ": " + why);
    }
  }
  S3ORAM_RETURN_IF_ERROR(sql::Exec(out.db, "BEGIN IMMEDIATE"));
  Status s = WriteRekeyStart(out.db, from.master());
  if (s.ok()) s = sql::Exec(out.db, "COMMIT");
  if (!s.ok()) return s.WithContext("recording the rekey in " + tmp);
  // The last connection's close checkpoints the copy's log into it.
  const int closed = sqlite3_close_v2(out.db);
  out.db = nullptr;
  if (closed != SQLITE_OK) return Status::IoError("closing " + tmp);
  if (NonEmpty(tmp + "-wal")) return Status::IoError("SQLite left a write-ahead log beside " + tmp);
  return Status::Ok();
}

}  // namespace

Result<StateHeader> SwitchMasterKey(UnlockedState& from, const KeyWrap& new_wrap,
                                    const Secret& new_master, int* lock_fd) {
  if (new_master.size() != kMasterKeyBytes) return Status::InvalidArgument("master key size");
  const std::string path = from.path();
  const std::string tmp = path + ".rekeying";
  auto remove_tmp = [&tmp] {
    for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((tmp + suffix).c_str());
  };
  remove_tmp();  // a copy left by a run killed before its rename
  auto fail = [&](const Status& s) {
    remove_tmp();
    return s.WithContext(path + ": replacing the master key");
  };
  // The header as on disk now; the new one continues its key epochs.
  auto headers = ReadStateHeader(path);
  if (!headers.ok()) return fail(headers.status());
  StateHeader header = headers->front();
  header.format = kStateFormat;
  header.generation += 1;
  header.wrap = new_wrap;
  if (Status s = WriteRekeyedCopy(from, header, new_master, tmp); !s.ok()) return fail(s);
  FaultPoint("rekey.switch.copied");
  if (Status s = SyncFile(tmp); !s.ok()) return fail(s);
  auto fresh = RenameStateOver(tmp, path, lock_fd, "rekey.switch.before_rename",
                               "rekey.switch.after_rename");
  if (!fresh.ok()) return fail(fresh.status());
  return *fresh;
}

}  // namespace s3oram

#include "oramcore/state/sql.h"

#include <sqlite3.h>

namespace s3oram::sql {

Status StatusOf(int rc, const std::string& msg) {
  // The sealed VFS's verdict on a page that fails its tag (sealed_vfs.h).
  if (rc == SQLITE_IOERR_DATA) {
    return Status::Corruption(msg +
                              ": a page of the sealed state failed authentication (it was "
                              "modified or damaged)");
  }
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_ERROR:  // our SQL is fixed, so "no such table/column" means a wrong schema
    case SQLITE_FORMAT:
      return Status::Corruption(msg);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status::Unavailable(msg);  // another process holds the database
    case SQLITE_CONSTRAINT:
      return Status::FailedPrecondition(msg);
    default:  // NOTFOUND, CANTOPEN, IOERR, FULL, READONLY, PERM, ...
      return Status::IoError(msg);
  }
}

Status Error(sqlite3* db, int rc, const std::string& what) {
  const char* detail = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return StatusOf(rc, what + ": " + detail);
}

Status Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string msg = std::string("executing \"") + sql + "\": " + (err ? err : sqlite3_errstr(rc));
  sqlite3_free(err);
  return StatusOf(rc, msg);
}

Result<std::int64_t> QueryInt(sqlite3* db, const char* sql) {
  Stmt st;
  S3ORAM_RETURN_IF_ERROR(st.Prepare(db, sql));
  S3ORAM_ASSIGN_OR_RETURN(bool row, st.Step(sql));
  if (!row) return Status::Corruption(std::string("\"") + sql + "\" returned no row");
  return st.ColumnInt(0);
}

Result<bool> TableExists(sqlite3* db, const char* name) {
  Stmt st(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1");
  S3ORAM_RETURN_IF_ERROR(st.status());
  st.Text(1, name);
  return st.Step("looking for a table");
}

Stmt::Stmt(sqlite3* db, const char* sql) { (void)Prepare(db, sql); }

Stmt::~Stmt() { sqlite3_finalize(stmt_); }

Status Stmt::Prepare(sqlite3* db, const char* sql) {
  sqlite3_finalize(stmt_);
  stmt_ = nullptr;
  db_ = db;
  const int rc = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  status_ =
      rc == SQLITE_OK ? Status::Ok() : Error(db, rc, std::string("preparing \"") + sql + "\"");
  return status_;
}

Stmt& Stmt::Int(int i, std::int64_t v) {
  sqlite3_bind_int64(stmt_, i, v);
  return *this;
}

Stmt& Stmt::Text(int i, std::string_view s) {
  sqlite3_bind_text64(stmt_, i, s.data(), s.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  return *this;
}

Stmt& Stmt::Blob(int i, const void* p, std::size_t n) {
  if (n == 0) {
    sqlite3_bind_zeroblob(stmt_, i, 0);
  } else {
    sqlite3_bind_blob64(stmt_, i, p, n, SQLITE_TRANSIENT);
  }
  return *this;
}

Stmt& Stmt::Null(int i) {
  sqlite3_bind_null(stmt_, i);
  return *this;
}

Status Stmt::Exec(const char* what) {
  const int rc = sqlite3_step(stmt_);
  Reset();
  if (rc != SQLITE_DONE) return Error(db_, rc, what);
  return Status::Ok();
}

Result<bool> Stmt::Step(const char* what) {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return Error(db_, rc, what);
}

bool Stmt::Next(Status* err, const char* what) {
  Result<bool> row = Step(what);
  if (!row.ok()) {
    *err = row.status();
    return false;
  }
  return *row;
}

void Stmt::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::int64_t Stmt::ColumnInt(int c) const { return sqlite3_column_int64(stmt_, c); }

bool Stmt::ColumnIsNull(int c) const { return sqlite3_column_type(stmt_, c) == SQLITE_NULL; }

int Stmt::ColumnType(int c) const { return sqlite3_column_type(stmt_, c); }

std::string Stmt::ColumnBytes(int c) const {
  const void* p = sqlite3_column_blob(stmt_, c);
  const int n = sqlite3_column_bytes(stmt_, c);
  return p ? std::string(static_cast<const char*>(p), static_cast<std::size_t>(n)) : std::string();
}

}  // namespace s3oram::sql

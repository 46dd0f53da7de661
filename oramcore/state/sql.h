// The one way into SQLite for every reader and writer of the client state
// file: ClientStateStore, the filesystem's MetadataStore, fsck, backups.
//
// Guarantees:
//  * Every SQLite failure becomes a Status whose code says what a caller can
//    do about it (StatusOf): a page of the sealed state that fails its tag
//    (sealed_vfs.h) and a damaged or foreign schema are Corruption, a
//    database held by another process is Unavailable, a violated constraint
//    FailedPrecondition, everything else IoError. The message names what was
//    being done and SQLite's own words.
//  * A Stmt owns its prepared statement and finalizes it; Exec() resets it
//    and clears its bindings, so one Stmt serves a batch of rows with the SQL
//    compiled once.
//  * Unsigned 64-bit values are stored as the signed integer with the same
//    bits (ToSql/FromSql), so every u64 round-trips, including those >= 2^63.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "oramcore/base/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace s3oram::sql {

inline std::int64_t ToSql(std::uint64_t v) { return std::bit_cast<std::int64_t>(v); }
inline std::uint64_t FromSql(std::int64_t v) { return std::bit_cast<std::uint64_t>(v); }

// The Status for SQLite result code `rc` (extended codes understood).
Status StatusOf(int rc, const std::string& msg);
// StatusOf with `what` and the connection's message (or rc's, without one).
Status Error(sqlite3* db, int rc, const std::string& what);
// Runs SQL that returns no rows (several statements allowed).
Status Exec(sqlite3* db, const char* sql);
// The integer in the first column of the first row (a PRAGMA, a count);
// Corruption if there is no row.
Result<std::int64_t> QueryInt(sqlite3* db, const char* sql);
// Whether the database has a table of that name.
Result<bool> TableExists(sqlite3* db, const char* name);

class Stmt {
 public:
  Stmt() = default;
  // Prepares at once; status() says whether that worked.
  Stmt(sqlite3* db, const char* sql);
  ~Stmt();
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Status Prepare(sqlite3* db, const char* sql);
  // The outcome of the last Prepare (Ok before any).
  const Status& status() const { return status_; }
  sqlite3_stmt* get() const { return stmt_; }

  // Parameters are numbered from 1. A zero-length blob is still a BLOB (not
  // NULL), so NOT NULL columns accept it.
  Stmt& Int(int i, std::int64_t v);
  Stmt& U64(int i, std::uint64_t v) { return Int(i, ToSql(v)); }
  Stmt& Text(int i, std::string_view s);
  Stmt& Blob(int i, const void* p, std::size_t n);
  Stmt& Blob(int i, std::string_view bytes) { return Blob(i, bytes.data(), bytes.size()); }
  Stmt& Null(int i);

  // Runs a statement that returns no rows, then resets it for the next
  // binding; `what` names the operation in an error.
  Status Exec(const char* what);
  // Steps a query: true with a row, false at the end, or an error.
  Result<bool> Step(const char* what);
  // The same for a loop: false at the end or on an error, which goes to *err.
  bool Next(Status* err, const char* what = "reading");
  // Ready to run again with new bindings.
  void Reset();

  // Columns of the current row, numbered from 0.
  std::int64_t ColumnInt(int c) const;
  std::uint64_t ColumnU64(int c) const { return FromSql(ColumnInt(c)); }
  bool ColumnIsNull(int c) const;
  // The column's type (SQLITE_INTEGER, SQLITE_BLOB, ...).
  int ColumnType(int c) const;
  // A BLOB or TEXT column's bytes (empty for NULL).
  std::string ColumnBytes(int c) const;

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  Status status_;
};

}  // namespace s3oram::sql

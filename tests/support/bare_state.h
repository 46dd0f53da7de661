// A bare client-state file for tests of the filesystem metadata alone: an
// SQLite database with just the `meta` table that MetadataStore expects to
// share with the ORAM client's tables (which these tests do not need).
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>

namespace s3oram::testing {

inline void CreateBareStateFile(const std::string& path) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr),
            SQLITE_OK);
  const int rc = sqlite3_exec(db, "CREATE TABLE meta(key TEXT PRIMARY KEY, value)", nullptr,
                              nullptr, nullptr);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK);
}

}  // namespace s3oram::testing

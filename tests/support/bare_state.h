// A bare client-state file for tests of the filesystem metadata alone: a
// sealed state (tests/support/sealed_state.h) whose database has just the
// `meta` table that MetadataStore expects to share with the ORAM client's
// tables (which these tests do not need).
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>

#include "tests/support/sealed_state.h"

namespace s3oram::testing {

inline void CreateBareStateFile(const std::string& path) {
  sqlite3* db = OpenTestStateDb(path);
  ASSERT_NE(db, nullptr);
  const int rc = sqlite3_exec(db, "CREATE TABLE meta(key TEXT PRIMARY KEY, value)", nullptr,
                              nullptr, nullptr);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK);
}

}  // namespace s3oram::testing

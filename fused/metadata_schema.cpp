#include "fused/metadata_schema.h"

namespace s3oram::fs {

const char* const kFsSchemaSql = R"sql(
CREATE TABLE IF NOT EXISTS fs_meta(key TEXT PRIMARY KEY NOT NULL, value NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fs_inodes(
  ino INTEGER PRIMARY KEY AUTOINCREMENT,
  mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL,
  nlink INTEGER NOT NULL CHECK (nlink >= 0), size INTEGER NOT NULL, rdev INTEGER NOT NULL,
  atime_ns INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS fs_inodes_nlink ON fs_inodes(nlink);
CREATE TABLE IF NOT EXISTS fs_dirents(
  cookie INTEGER PRIMARY KEY AUTOINCREMENT,
  parent INTEGER NOT NULL, name BLOB NOT NULL, ino INTEGER NOT NULL,
  UNIQUE(parent, name));
CREATE INDEX IF NOT EXISTS fs_dirents_parent_cookie ON fs_dirents(parent, cookie);
CREATE INDEX IF NOT EXISTS fs_dirents_ino ON fs_dirents(ino);
CREATE TABLE IF NOT EXISTS fs_symlinks(ino INTEGER PRIMARY KEY, target BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS fs_xattrs(
  ino INTEGER NOT NULL, name BLOB NOT NULL, value BLOB NOT NULL,
  PRIMARY KEY(ino, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fs_blocks(
  ino INTEGER NOT NULL, idx INTEGER NOT NULL, block_id INTEGER NOT NULL,
  slot INTEGER NOT NULL DEFAULT 0, slots INTEGER NOT NULL DEFAULT 0,
  valid INTEGER NOT NULL DEFAULT 0,
  next_id INTEGER, next_slot INTEGER, next_slots INTEGER,
  PRIMARY KEY(ino, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fs_free_blocks(block_id INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS fs_shared(
  block_id INTEGER PRIMARY KEY, used INTEGER NOT NULL, nused INTEGER NOT NULL,
  longest INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS fs_shared_longest ON fs_shared(longest, block_id);
)sql";

const char* const kFsLostTableSql = R"sql(
CREATE TABLE IF NOT EXISTS fs_lost(
  ino INTEGER NOT NULL, idx INTEGER NOT NULL,
  PRIMARY KEY(ino, idx)) WITHOUT ROWID;
)sql";

// Version 2 to 3: the old fs_blocks (block_id UNIQUE, whole blocks) copied
// into the new shape; fs_shared starts empty.
const char* const kFsMigrate2To3Sql = R"sql(
ALTER TABLE fs_blocks RENAME TO fs_blocks_v2;
CREATE TABLE fs_blocks(
  ino INTEGER NOT NULL, idx INTEGER NOT NULL, block_id INTEGER NOT NULL,
  slot INTEGER NOT NULL DEFAULT 0, slots INTEGER NOT NULL DEFAULT 0,
  valid INTEGER NOT NULL DEFAULT 0,
  next_id INTEGER, next_slot INTEGER, next_slots INTEGER,
  PRIMARY KEY(ino, idx)) WITHOUT ROWID;
INSERT INTO fs_blocks(ino, idx, block_id, valid) SELECT ino, idx, block_id, valid FROM fs_blocks_v2;
DROP TABLE fs_blocks_v2;
CREATE TABLE fs_shared(
  block_id INTEGER PRIMARY KEY, used INTEGER NOT NULL, nused INTEGER NOT NULL,
  longest INTEGER NOT NULL);
CREATE INDEX fs_shared_longest ON fs_shared(longest, block_id);
UPDATE fs_meta SET value = 3 WHERE key = 'schema_version';
)sql";

}  // namespace s3oram::fs

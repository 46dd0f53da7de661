// The input format of client_state_fuzz, shared with make_corpus (which
// writes seeds in it): a script of mutations applied to a copy of a valid
// client state file (oramcore/state/client_state.cpp, schema version 1) before the
// harness opens and loads it. Little-endian; reads past the end give zeros.
//
//   input := op*                       (at most kMaxOps are applied)
//   op    := kind:u8 ...               kind % kOpCount selects:
//     kUpdateRow  table:u8 column:u8 key value   UPDATE t SET c = value WHERE <key column> = key
//     kUpdateAll  table:u8 column:u8 value       UPDATE t SET c = value
//     kInsert     table:u8 value{columns of t}   INSERT OR REPLACE INTO t VALUES (...)
//     kDelete     table:u8 key                   DELETE FROM t WHERE <key column> = key
//     kPragma     which:u8 v:i32                 PRAGMA user_version | application_id = v
//     kSchema     which:u8 table:u8              DROP t | rename t | add a column | recreate t as (x)
//     kPoke       offset:u16 byte:u8             after SQLite closed the file: file[offset % size] = byte
//     kMeta       name:u8 value                  UPDATE meta SET value = value WHERE key = kMetaKeys[name]
//   key   := name:u8 (kMetaKeys[name], for table meta) | value (other tables)
//   value := type:u8 ...               type % kValueTypeCount selects:
//     kSmallInt i8 | kInt64 i64 | kReal f64 bits | kText len:u8 bytes | kBlob len:u8 bytes | kNull
// Table and column bytes are taken modulo the table count and the table's
// column count. CHECK constraints are switched off while the script runs, so a
// script can store what only a damaged or hostile file would hold.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace s3oram::fuzz {

struct StateTable {
  const char* name;
  const char* key;  // the column a row is selected by
  std::array<const char*, 5> columns;
  std::size_t column_count;
};

inline constexpr StateTable kStateTables[] = {
    {"meta", "key", {"key", "value"}, 2},
    {"servers", "idx", {"idx", "endpoint", "public_key"}, 3},
    {"counters", "id", {"id", "nr", "ne", "seq", "epoch"}, 5},
    {"positions", "id", {"id", "leaf", "level", "slot", "version"}, 5},
    {"pending", "seq", {"seq", "kind", "payload"}, 3},
};
inline constexpr std::size_t kStateTableCount = std::size(kStateTables);
inline constexpr std::size_t kMetaTable = 0;

inline constexpr const char* kMetaKeys[] = {
    "schema_version", "fs_id",           "height", "bucket_size", "evict_rate",   "block_bytes",
    "capacity_blocks", "lambda",         "parties", "threshold",  "allow_unsafe",
    "kdf_ops",         "kdf_mem",        "key_salt", "key_nonce", "key_sealed",   "client_key_file",
};
inline constexpr std::size_t kMetaKeyCount = std::size(kMetaKeys);

enum StateOp : std::uint8_t {
  kUpdateRow,
  kUpdateAll,
  kInsert,
  kDelete,
  kPragma,
  kSchema,
  kPoke,
  kMeta,
  kOpCount
};
enum StateValueType : std::uint8_t { kSmallInt, kInt64, kReal, kText, kBlob, kNull, kValueTypeCount };
enum StateSchemaChange : std::uint8_t { kDrop, kRename, kAddColumn, kRecreate, kSchemaChangeCount };

inline constexpr std::size_t kMaxOps = 24;

}  // namespace s3oram::fuzz

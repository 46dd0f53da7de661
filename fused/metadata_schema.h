// The filesystem's tables in the client state file: the contract between
// MetadataStore, which alone writes them in normal operation, and fsck, which
// reads them raw (to examine a state the store would refuse) and repairs them.
//
// Schema (fs schema version 3), in the client state file next to the
// ClientStateStore tables:
//   fs_meta(key TEXT PRIMARY KEY, value)  schema_version, capacity_blocks,
//                                         block_bytes, slots_per_block,
//                                         next_unused, sync_count
//   fs_inodes(ino INTEGER PRIMARY KEY AUTOINCREMENT, mode, uid, gid, nlink,
//             size, rdev, atime_ns, mtime_ns, ctime_ns)
//   fs_dirents(cookie INTEGER PRIMARY KEY AUTOINCREMENT, parent, name BLOB,
//              ino, UNIQUE(parent, name))
//   fs_symlinks(ino PRIMARY KEY, target BLOB)
//   fs_xattrs(ino, name BLOB, value BLOB, PRIMARY KEY(ino, name))
//   fs_blocks(ino, idx, block_id, slot, slots, valid,
//             next_id, next_slot, next_slots, PRIMARY KEY(ino, idx))
//   fs_shared(block_id PRIMARY KEY, used, nused, longest)
//   fs_free_blocks(block_id PRIMARY KEY)
//   fs_lost(ino, idx, PRIMARY KEY(ino, idx))  blocks whose last write never
//                                         reached the servers (MarkLost);
//                                         always a mapped (ino, idx). Added
//                                         beside version 3 without a version
//                                         change: created at every Open, so
//                                         an older daemon ignores it.
// Block allocation (block_layout.h): ids below next_unused are either mapped
// whole by exactly one extent (slots 0, as a block's `at` or `next`),
// shared (a fs_shared row whose `used` slot mask is the union of the
// fragments in it, none overlapping; `nused` its popcount, `longest` its
// longest free run, for the allocator's index), or free (fs_free_blocks);
// ids from next_unused up to the capacity have never been used. A shared
// block whose last fragment is freed becomes free. `valid` is how many
// leading bytes of the ORAM's copy of an extent belong to the file: 0 for
// an extent allocated but never written back (the ORAM may still hold a
// previous owner's data there), at most the part of the block below the
// file size (Truncate lowers it, MarkWritten raises it). The daemon reads
// every byte at or past `valid` as zero. next_* (NULL when none) is a
// relocation target (BlockMapping::next). AUTOINCREMENT keeps inode numbers
// and cookies from being reused.
//
// Version 2 (whole blocks only, block_id UNIQUE) is migrated to 3 in place
// at Open, in one transaction: every old mapping becomes a whole extent.
#pragma once

#include <cstddef>
#include <cstdint>

namespace s3oram::fs {

using Ino = std::uint64_t;
inline constexpr Ino kRootIno = 1;
// Entry names are 1..kMaxNameBytes bytes, without '/' or NUL, never "." or "..".
inline constexpr std::size_t kMaxNameBytes = 255;

// The schema this code writes; version 2 is migrated to it at Open.
inline constexpr std::int64_t kFsSchemaVersion = 3;
// The tables of kFsSchemaVersion (CREATE ... IF NOT EXISTS).
extern const char* const kFsSchemaSql;
// Version 2 to 3 in place; the caller then sets slots_per_block.
extern const char* const kFsMigrate2To3Sql;
// fs_lost (CREATE ... IF NOT EXISTS), run at every Open.
extern const char* const kFsLostTableSql;

}  // namespace s3oram::fs

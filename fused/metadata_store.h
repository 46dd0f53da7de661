// MetadataStore: the filesystem's metadata in the client's SQLite state file.
//
// Everything the servers must not learn lives here, on the laptop: inodes,
// directory entries, symlink targets, xattrs, and the map from (file, block
// index) to ORAM block id. File data lives in fixed-size ORAM blocks with ids
// 0..capacity_blocks-1; this store only allocates and maps those ids, it never
// touches the ORAM. The FUSE daemon is the only caller.
//
// Error scheme. Open() returns a Result (a Status, as everywhere in s3oram).
// Every filesystem operation returns a POSIX errno as an int: 0 on success,
// otherwise the positive errno to hand to fuse_reply_err (ENOENT, EEXIST,
// ENOTDIR, EISDIR, ENOTEMPTY, ENAMETOOLONG, ENOSPC, EINVAL, EPERM, ENODATA,
// ERANGE, E2BIG, EFBIG, ENOMEM, EIO). Results come back through optional
// out-parameters (nullptr allowed), meaningful only when the call returned 0.
// EIO means SQLite failed; its message is kept and available from
// last_error() (the daemon logs it) until the next transaction begins. On any error the
// operation's transaction is rolled back, so a failed operation changes
// nothing. CheckInvariants() is a diagnostic and returns a Status.
//
// Transactions and durability. Each operation is one SQLite transaction
// (BEGIN IMMEDIATE for writes). The connection runs WAL with
// synchronous=NORMAL: a committed operation survives a crash of the daemon but
// not necessarily a power loss. Sync() makes every committed operation durable
// (it commits with synchronous=FULL, which fsyncs the WAL). The store
// serializes its callers with a mutex, so it may be shared by the threads of
// the FUSE loop.
//
// Orphans. Unlink, Rmdir and Rename may drop an inode's link count to 0. The
// inode (and its blocks) is then kept as an orphan, because the kernel may
// still have it open; the daemon calls ForgetOrphan(ino) once the kernel has
// forgotten it. After a crash, PurgeOrphans() at mount frees every orphan.
//
// Names are byte strings of 1..255 bytes without '/' or NUL ("." and ".." are
// handled by the daemon; Lookup accepts them for convenience).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fused/block_layout.h"
#include "fused/metadata_schema.h"
#include "oramcore/base/status.h"
#include "oramcore/state/state_file.h"

struct sqlite3;

namespace s3oram::fs {

inline constexpr std::size_t kMaxSymlinkBytes = 4095;
inline constexpr std::size_t kMaxXattrNameBytes = 255;
inline constexpr std::size_t kMaxXattrValueBytes = 65536;

// Rename flags (same values as Linux's RENAME_NOREPLACE / RENAME_EXCHANGE).
inline constexpr unsigned kRenameNoReplace = 1u << 0;
inline constexpr unsigned kRenameExchange = 1u << 1;
// SetXattr flags (same values as XATTR_CREATE / XATTR_REPLACE).
inline constexpr int kXattrCreate = 1;
inline constexpr int kXattrReplace = 2;

struct Attr {
  Ino ino = 0;
  std::uint32_t mode = 0;  // file type and permission bits, as st_mode
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::uint32_t nlink = 0;
  std::uint64_t size = 0;
  std::uint64_t rdev = 0;
  std::int64_t atime_ns = 0;  // nanoseconds since the epoch (CLOCK_REALTIME)
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  std::uint64_t mapped_bytes = 0;  // ORAM bytes the file's extents hold (holes cost none)
};

struct DirEntry {
  std::uint64_t cookie = 0;  // >= 1; strictly increasing in ReadDir order
  std::string name;
  Ino ino = 0;
  std::uint32_t type = 0;  // the S_IFMT bits of the target's mode
};

// What SetAttr changes: an OR of these bits. Size is changed by Truncate.
inline constexpr unsigned kSetMode = 1u << 0;  // permission bits only (07777); type is kept
inline constexpr unsigned kSetUid = 1u << 1;
inline constexpr unsigned kSetGid = 1u << 2;
inline constexpr unsigned kSetAtime = 1u << 3;
inline constexpr unsigned kSetMtime = 1u << 4;
inline constexpr unsigned kSetCtime = 1u << 5;  // otherwise ctime becomes "now"

struct SetAttrIn {
  unsigned mask = 0;
  std::uint32_t mode = 0;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::int64_t atime_ns = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
};

// One mapped block of a file: where it lives (block_layout.h) and how much
// of it is the file's. `valid` counts the leading bytes of the extent's ORAM
// copy that belong to the file; every byte at or past it reads as zero. It
// is 0 from allocation (the ORAM may still hold a previous owner's data)
// until the daemon reports a write-back (MarkWritten), and never exceeds the
// part of the block below the file size (Truncate lowers it).
//
// `next` is a relocation in progress: a write needed more slots than the
// extent has while the extent held data (valid > 0). The data stay where
// they are (and readable, fsynced or not) until the daemon has written the
// whole block to `next`; MarkWritten of `next` then switches the mapping
// and frees the old extent. So a crash at any point leaves either the old
// copy or the new one mapped, never neither.
struct BlockMapping {
  std::uint64_t idx = 0;
  BlockId id = 0;
  std::uint32_t valid = 0;
  std::uint32_t slot = 0;
  std::uint32_t slots = 0;  // 0: the whole block (see Extent)
  std::optional<Extent> next;
  // Its last write never reached the servers (the write-back failed until
  // an unmount dropped it: MarkLost). Reads of the block fail with EIO
  // instead of returning the older bytes or zeros the servers hold; a
  // write-back of the block (MarkWritten), a truncation or freeing the file
  // clears it. Set by GetBlocks only.
  bool lost = false;
  Extent at() const { return Extent{id, slot, slots}; }
  // Where a write-back of this block goes.
  Extent target() const { return next ? *next : at(); }
};

// A write-back the daemon reports: block `idx` of `ino` now holds, in
// `extent`, the daemon's copy (zero past the file size).
struct WrittenExtent {
  Ino ino = 0;
  std::uint64_t idx = 0;
  Extent extent;
};

struct FsStats {
  std::uint64_t total_blocks = 0;  // ORAM capacity in blocks
  std::uint64_t free_blocks = 0;   // free space in whole blocks (free slots / slots per block)
  std::uint32_t block_bytes = 0;
  std::uint64_t inodes = 0;        // inodes in the table, orphans included
};

class MetadataStore {
 public:
  // Opens the existing (unlocked, sealed) state file with a connection of its
  // own, creates the fs_ tables on first use (with the root directory, owned
  // by the calling process's uid/gid), and checks the stored fs schema
  // version (Corruption if unknown), capacity and block size
  // (FailedPrecondition if they differ from what the tables were made with).
  static Result<std::unique_ptr<MetadataStore>> Open(std::shared_ptr<UnlockedState> state,
                                                     std::uint64_t capacity_blocks,
                                                     std::uint32_t block_bytes);
  ~MetadataStore();
  MetadataStore(const MetadataStore&) = delete;
  MetadataStore& operator=(const MetadataStore&) = delete;

  // --- names and inodes -----------------------------------------------------
  [[nodiscard]] int Lookup(Ino parent, std::string_view name, Attr* out);
  [[nodiscard]] int GetAttr(Ino ino, Attr* out);
  // Any non-directory, non-symlink type (a mode without type bits means a
  // regular file). EINVAL for S_IFDIR / S_IFLNK.
  [[nodiscard]] int Create(Ino parent, std::string_view name, std::uint32_t mode,
                           std::uint32_t uid, std::uint32_t gid, std::uint64_t rdev, Attr* out);
  [[nodiscard]] int Mkdir(Ino parent, std::string_view name, std::uint32_t mode, std::uint32_t uid,
                          std::uint32_t gid, Attr* out);
  [[nodiscard]] int Symlink(Ino parent, std::string_view name, std::string_view target,
                            std::uint32_t uid, std::uint32_t gid, Attr* out);
  [[nodiscard]] int ReadLink(Ino ino, std::string* target);  // EINVAL if not a symlink
  // Hard link; EPERM for directories, ENOENT for an orphan.
  [[nodiscard]] int Link(Ino ino, Ino new_parent, std::string_view new_name, Attr* out);
  // Removes a non-directory entry. *orphaned (optional) tells whether the
  // inode's link count reached 0 (call ForgetOrphan when the kernel forgets it).
  [[nodiscard]] int Unlink(Ino parent, std::string_view name, bool* orphaned);
  // Removes an empty directory; the directory inode becomes an orphan.
  // *removed_ino (optional) receives its inode number.
  [[nodiscard]] int Rmdir(Ino parent, std::string_view name, Ino* removed_ino);
  // POSIX rename with kRenameNoReplace / kRenameExchange. *orphaned_ino
  // (optional) receives the inode whose link count reached 0 by being
  // replaced, or 0.
  [[nodiscard]] int Rename(Ino parent, std::string_view name, Ino new_parent,
                           std::string_view new_name, unsigned flags, Ino* orphaned_ino);
  // Entries of `dir` with cookie > after_cookie, at most `max`, in cookie
  // order. Cookies are stable: entries added or removed while a listing is in
  // progress never make it repeat or skip an entry that existed throughout.
  [[nodiscard]] int ReadDir(Ino dir, std::uint64_t after_cookie, std::size_t max,
                            std::vector<DirEntry>* out);
  [[nodiscard]] int SetAttr(Ino ino, const SetAttrIn& in, Attr* out);
  // Sets the size of a regular file (EISDIR for directories, EINVAL for other
  // types). Blocks wholly beyond the new size are unmapped and returned to the
  // free list; their ids go to *freed (optional) so the daemon can drop cached
  // data. The daemon must zero the tail of a partial last block itself.
  [[nodiscard]] int Truncate(Ino ino, std::uint64_t new_size, std::vector<BlockId>* freed,
                             Attr* out);
  // Frees an orphan (link count 0): its blocks, xattrs, symlink target and
  // inode. No-op (0) if the inode is gone or still linked. Freed ids go to
  // *freed (optional).
  [[nodiscard]] int ForgetOrphan(Ino ino, std::vector<BlockId>* freed);
  // Frees every orphan (call once at mount, before serving). *count receives
  // how many inodes were freed.
  [[nodiscard]] int PurgeOrphans(std::uint64_t* count);

  // --- xattrs ---------------------------------------------------------------
  [[nodiscard]] int SetXattr(Ino ino, std::string_view name, std::string_view value, int flags);
  [[nodiscard]] int GetXattr(Ino ino, std::string_view name, std::string* value);  // ENODATA
  [[nodiscard]] int ListXattr(Ino ino, std::vector<std::string>* names);
  [[nodiscard]] int RemoveXattr(Ino ino, std::string_view name);  // ENODATA

  // --- blocks ---------------------------------------------------------------
  // The ORAM block holding block `idx` of a regular file; nullopt for a hole.
  [[nodiscard]] int GetBlock(Ino ino, std::uint64_t idx, std::optional<BlockId>* out);
  // The block holding `idx`, allocating one (ENOSPC when the ORAM is full) if
  // it is a hole. In the same transaction the file's size is raised to at
  // least `min_size` (pass the end offset of the write being served), so a
  // crash never leaves a block mapped beyond the size. EINVAL if `idx` lies
  // wholly beyond max(size, min_size); EINVAL/EISDIR for non-regular files.
  [[nodiscard]] int MapBlock(Ino ino, std::uint64_t idx, std::uint64_t min_size, BlockId* out);
  // The mapped blocks with index in [first_idx, first_idx + count), in index
  // order (holes omitted), and the file's attributes, in one snapshot.
  [[nodiscard]] int GetBlocks(Ino ino, std::uint64_t first_idx, std::uint64_t count,
                              std::vector<BlockMapping>* out, Attr* attr);
  // What a write of [offset, offset + length) needs, in one transaction:
  // every block of the range mapped to an extent big enough for the bytes
  // the file will have in it (holes get fresh extents with valid 0; an
  // extent too small that holds no data is replaced, one that holds data
  // gets a relocation target, BlockMapping::next; all or nothing: ENOSPC
  // changes nothing), the size raised to offset + length if smaller, and
  // mtime/ctime set to now. *out gets the range's mappings in index order
  // and *attr the attributes from before the write (the daemon needs the old
  // size to zero the grown part of the old last block). Fragments are used
  // for blocks the file fills less than completely; a file's consecutive
  // small writes land in one shared block where they fit.
  // EFBIG if the end exceeds INT64_MAX; EISDIR/EINVAL for non-regular files.
  [[nodiscard]] int PrepareWrite(Ino ino, std::uint64_t offset, std::uint64_t length,
                                 std::vector<BlockMapping>* out, Attr* old_attr);
  // Records that the ORAM now holds the daemon's copy of these blocks, whose
  // bytes past the file size are zero: valid becomes the part of each block
  // below the file's current size (clipped to the extent). A write-back to
  // a block's relocation target switches the mapping to it and frees the old
  // extent. Reports of extents no longer mapped there are ignored.
  [[nodiscard]] int MarkWritten(const std::vector<WrittenExtent>& written);
  // Marks blocks (ino, idx) whose data were written but could not be stored
  // (unmount gave up on their write-back) as lost: see BlockMapping::lost.
  // Blocks that are not mapped (any more) and blocks of unlinked files
  // (nlink 0: freed at the next mount) are skipped; *marked counts the rest.
  [[nodiscard]] int MarkLost(const std::vector<std::pair<Ino, std::uint64_t>>& blocks,
                             std::size_t* marked);
  // Every block marked lost, (ino, idx) in order (fsck, tests).
  [[nodiscard]] int LostBlocks(std::vector<std::pair<Ino, std::uint64_t>>* out);
  [[nodiscard]] int StatFs(FsStats* out);

  // Makes every committed operation durable (fsyncs the WAL).
  [[nodiscard]] int Sync();
  // Consistency check of all tables: link counts against directory entries
  // and subdirectories, dangling entries, an acyclic tree reachable from the
  // root, whole blocks mapped once, fragments within their block and not
  // overlapping, shared-block slot maps equal to their fragments, ids in
  // range, disjoint from the free list, none leaked, valid within the extent
  // and the size, and no block mapped beyond a file's size. Corruption on
  // failure.
  Status CheckInvariants();

  // The SQLite message behind the last EIO (empty if none).
  std::string last_error() const;

  std::uint64_t capacity_blocks() const { return capacity_; }
  std::uint32_t block_bytes() const { return block_bytes_; }
  const BlockLayout& layout() const { return layout_; }

  class Impl;  // the transaction-scoped helpers (metadata_store_internal.h)

 private:
  MetadataStore(sqlite3* db, std::uint64_t capacity, std::uint32_t block_bytes);

  template <typename F>
  int Run(bool write, F&& body);

  std::shared_ptr<UnlockedState> state_;  // its VFS outlives db_
  sqlite3* db_;
  std::uint64_t capacity_;
  std::uint32_t block_bytes_;
  BlockLayout layout_;
  std::unique_ptr<Impl> impl_;
  mutable std::mutex mu_;
  std::string last_error_;
};

}  // namespace s3oram::fs

// Fsck: the consistency checker behind `s3oram fsck` (docs/ARCHITECTURE.md
// §10, fsck). No FUSE here: it reads the client state file with a connection of
// its own and, for the block phase, reads blocks through an OramClient.
//
// Structure, so the checks stay pure and testable:
//  * FsckSnapshot::Load reads every row the checks need (ORAM parameters,
//    counters, pending operations, raw position rows, and the filesystem
//    tables) in one read transaction, validating nothing, so that a state the
//    ORAM client refuses to load (a position outside the tree, two blocks in
//    one slot) can still be examined.
//  * CheckOram (phase 1) and CheckMetadata (phase 2) are pure functions of a
//    snapshot: they return every problem found (not only the first) and the
//    repairs that would fix the repairable ones.
//  * Apply* write a phase's repairs in one SQLite transaction.
//  * CheckBlocks (phase 3) reads every block that holds file data through the
//    ORAM, which verifies its AEAD tag and version.
//
// Legal states that are never reported as errors (they follow from the crash
// rules in file_data.h and metadata_store.h):
//  * a block mapped to a file with valid = 0 and no position-map entry
//    (allocated by PrepareWrite, the crash came before its write-back);
//  * a block with valid = 0 that has a position (written back, the crash came
//    before MarkWritten; or a previous owner's copy): it reads as zeros;
//  * a free-list block that still has a position (unlink and truncate free
//    ids in the metadata only; the ORAM keeps the stale copy until the id is
//    reused and rewritten);
//  * an inode with nlink 0 and no entries (unlinked while open, purged at the
//    next mount) and a pending eviction matching the eviction counter
//    (finished by the next Open).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fused/block_layout.h"
#include "fused/metadata_schema.h"
#include "oramcore/base/status.h"
#include "oramcore/protocol/client.h"
#include "oramcore/state/state_file.h"

namespace s3oram::fs {

inline constexpr const char* kLostFoundName = "lost+found";

// Raw rows of the state file. Integers are as stored (u64 bit patterns).
struct FsckSnapshot {
  OramParams params;
  Counters counters;
  struct Pending {
    std::uint64_t seq = 0;
    std::string kind;
    std::vector<std::uint8_t> payload;
  };
  std::vector<Pending> pending;
  struct PositionRow {
    std::uint64_t id = 0;
    std::int64_t leaf = 0, level = 0, slot = 0;
    std::uint64_t version = 0;
  };
  std::vector<PositionRow> positions;

  // Filesystem tables; absent in a state that was never mounted.
  bool has_fs = false;
  std::optional<std::uint64_t> next_unused;
  std::uint64_t fs_capacity_blocks = 0;
  std::uint64_t fs_block_bytes = 0;
  std::int64_t fs_schema_version = 0;
  std::optional<std::int64_t> slots_per_block;  // fs_meta; absent before schema 3
  struct Inode {
    std::uint32_t mode = 0;
    std::int64_t nlink = 0;
    std::uint64_t size = 0;
    std::uint32_t uid = 0, gid = 0;
  };
  std::map<Ino, Inode> inodes;
  struct Dirent {
    std::uint64_t cookie = 0;
    Ino parent = 0;
    std::string name;
    Ino ino = 0;
  };
  std::vector<Dirent> dirents;  // in cookie order
  struct Block {
    Ino ino = 0;
    std::uint64_t idx = 0;
    BlockId id = 0;
    std::int64_t valid = 0;
    std::uint32_t slot = 0, slots = 0;  // the extent (block_layout.h)
    std::optional<Extent> next;         // relocation target
    bool lost = false;                  // marked in fs_lost (BlockMapping::lost)
    Extent at() const { return Extent{id, slot, slots}; }
  };
  std::vector<Block> blocks;  // in (ino, idx) order
  std::vector<BlockId> free_blocks;
  struct Shared {
    BlockId id = 0;
    std::uint64_t used = 0;
    std::int64_t nused = 0, longest = 0;
  };
  std::vector<Shared> shared;  // fs_shared rows
  std::vector<Ino> symlink_rows;
  std::uint64_t xattr_rows_of_missing_inodes = 0;

  // Opens the unlocked state read-only (nothing is written, not even the
  // journal mode).
  static Result<FsckSnapshot> Load(UnlockedState& state);
};

// For each file part that holds data (valid > 0) in one of `ids`:
// "inode 12 (/a/b) block 3 (bytes 12288..16383, ORAM block 40)", in (inode,
// block) order. Used to name what a forced restore lost.
std::vector<std::string> DescribeBlockOwners(const FsckSnapshot& snap,
                                             const std::vector<BlockId>& ids);

// One change to the state file. Repairs are computed against a snapshot and
// applied in one transaction per phase.
struct FsckRepair {
  enum class Kind {
    kDeletePosition,    // a: block id
    kDeleteEntry,       // a: cookie
    kCreateLostFound,   // a: uid, b: gid (the root's owner)
    kLinkLostFound,     // a: ino, linked in /lost+found as `name` ("#<ino>")
    kSetNlink,          // a: ino, b: nlink
    kUnmapBlock,        // a: ino, b: idx, c: block id (returned to the free list if in range)
    kSetValid,          // a: ino, b: idx, c: valid
    kClearNext,         // a: ino, b: idx (drops a relocation target)
    kRewriteShared,     // fs_shared recomputed from the fragments in fs_blocks
    kAddFree,           // a: block id
    kRemoveFree,        // a: block id
    kSetNextUnused,     // a: value
    kDeleteSymlinkRow,  // a: ino
    kDeleteStrayXattrs,
    kClearLost,         // a: ino, b: idx (the block reads as what the servers hold)
  };
  Kind kind;
  std::uint64_t a = 0, b = 0, c = 0;
  std::string name = {};
};

struct FsckProblem {
  int phase = 0;
  std::string message;      // names inode numbers and paths where known
  bool repairable = false;  // a repair in the phase's plan fixes it
};

struct FsckPhaseResult {
  std::vector<FsckProblem> problems;  // errors
  std::vector<std::string> notes;     // legal states worth mentioning
  std::vector<FsckRepair> repairs;
  bool position_map_loadable = true;  // phase 1: OramClient::Open can load it
  std::uint64_t unrepairable() const;
};

struct FsckOptions {
  // Drop the file data of blocks that cannot be recovered (a written block
  // whose position is lost or invalid, a block that fails authentication):
  // their valid length becomes 0, so they read as zeros. Off by default:
  // such blocks are reported and left alone.
  bool zero_damaged = false;
};

// Phase 1: the position map against the tree (ranges, slot uniqueness, root
// slots below nr), the counters, and pending operations.
FsckPhaseResult CheckOram(const FsckSnapshot& snap, const FsckOptions& options);

// Phase 2: the filesystem metadata, and its agreement with the position map.
// `snap` should already have phase 1's position repairs applied (or not, in a
// dry run: positions phase 1 would delete are then taken as absent).
FsckPhaseResult CheckMetadata(const FsckSnapshot& snap, const FsckOptions& options,
                              const std::set<BlockId>& positions_deleted_by_phase1 = {});

// "/a/b" for a reachable inode, else "#<ino> (unreachable)".
std::string FsckPathOf(const FsckSnapshot& snap, Ino ino);

// Applies repairs in one IMMEDIATE transaction (all or nothing).
Status ApplyFsckRepairs(UnlockedState& state, const std::vector<FsckRepair>& repairs);

// Phase 3: reads every block a file maps with valid > 0 through `client`.
struct FsckBlockResult {
  std::uint64_t blocks_read = 0;
  std::vector<FsckProblem> problems;
  std::vector<FsckRepair> repairs;  // with zero_damaged
  bool cancelled = false;
  Status fatal;  // a failure that is not a damaged block (servers unreachable)
};
FsckBlockResult CheckBlocks(
    OramClient& client, const FsckSnapshot& snap, const FsckOptions& options,
    const std::function<void(std::uint64_t done, std::uint64_t total)>& progress,
    const std::atomic<bool>* cancel);

}  // namespace s3oram::fs

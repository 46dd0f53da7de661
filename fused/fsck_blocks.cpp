// Fsck phase 3 (fsck.h, CheckBlocks): every block that holds file data,
// read through the ORAM, which checks its AEAD tag and version.
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "fused/fsck.h"
#include "fused/fsck_internal.h"
#include "oramcore/state/sql.h"

namespace s3oram::fs {

using namespace fsck_detail;
using sql::FromSql;
using sql::ToSql;

std::vector<std::string> DescribeBlockOwners(const FsckSnapshot& snap,
                                             const std::vector<BlockId>& ids) {
  const std::set<BlockId> wanted(ids.begin(), ids.end());
  const PathNamer names(snap);
  std::vector<std::string> out;
  for (const auto& b : snap.blocks) {
    if (b.valid > 0 && wanted.count(b.id) != 0) out.push_back(BlockOwner(snap, names, b));
  }
  return out;
}

// --- phase 3: the blocks ------------------------------------------------------------

FsckBlockResult CheckBlocks(OramClient& client, const FsckSnapshot& snap,
                            const FsckOptions& options,
                            const std::function<void(std::uint64_t, std::uint64_t)>& progress,
                            const std::atomic<bool>* cancel) {
  FsckBlockResult r;
  const PathNamer names(snap);
  // Blocks whose last write an unmount gave up on: what the servers hold
  // is older than what the file had, so reads fail until it is rewritten.
  for (const auto& b : snap.blocks) {
    if (!b.lost) continue;
    // An unlinked inode awaiting removal (the next mount frees it): nobody
    // can read it any more.
    if (auto it = snap.inodes.find(b.ino); it != snap.inodes.end() && it->second.nlink == 0) {
      continue;
    }
    const std::string m = BlockOwner(snap, names, b) +
                          " lost its last write: its write-back never reached the servers "
                          "before an unmount gave up on it, so reads of it fail with EIO until "
                          "it is written again";
    if (options.zero_damaged) {
      r.problems.push_back({3, m + "; it will read as what the servers hold (older bytes or "
                                   "zeros)",
                            true});
      r.repairs.push_back({FsckRepair::Kind::kClearLost, b.ino, b.idx});
    } else {
      r.problems.push_back(
          {3, m + " (--zero-damaged makes it read as what the servers hold)", false});
    }
  }
  // Blocks holding file data that the ORAM has a position for (the others
  // read as zeros without an access, or were reported by phase 2).
  // A shared block is read once for all of its fragments.
  std::map<BlockId, std::vector<const FsckSnapshot::Block*>> todo;
  for (const auto& b : snap.blocks) {
    if (b.valid > 0 && b.id < client.params().capacity_blocks && client.position_map().Find(b.id)) {
      todo[b.id].push_back(&b);
    }
  }
  const std::uint64_t total = todo.size();
  if (progress) progress(0, total);
  for (auto it = todo.begin(); it != todo.end(); ++it) {
    const auto& [id, owners] = *it;
    if (cancel && cancel->load()) {
      r.cancelled = true;
      return r;
    }
    // Fail-stop (OramClient::writes_stopped): every read takes a root slot
    // and no eviction empties the root until the damaged server is repaired,
    // so once the root is full nothing more can be read. That says nothing
    // about the blocks left: each is listed as not checked, not as
    // unreadable, after one line that says why.
    if (const auto& stopped = client.writes_stopped();
        stopped && client.counters().nr >= client.params().evict_rate) {
      r.problems.push_back(
          {3,
           std::to_string(total - r.blocks_read) + " of " + std::to_string(total) +
               " blocks with file data were not read: each read needs room in the root, which "
               "only an eviction makes, and evictions are stopped until the damaged server is "
               "repaired (" +
               stopped->message() + "); repair it, then run fsck again",
           false});
      for (; it != todo.end(); ++it) {
        for (const FsckSnapshot::Block* b : it->second) {
          r.problems.push_back(
              {3, BlockOwner(snap, names, *b) + " was not checked (reads stopped, above)", false});
        }
      }
      return r;
    }
    auto data = client.Read(id);
    if (!data.ok()) {
      if (cancel && cancel->load()) {
        r.cancelled = true;
        return r;
      }
      if (data.status().code() == Status::Code::kDamaged) {
        // A server's stored shares failed their digests: the block is not
        // lost (the other servers hold theirs) but unreadable until that
        // server is rebuilt. Nothing here can repair it, and zeroing it
        // would throw away data that a rebuild recovers.
        for (const FsckSnapshot::Block* b : owners) {
          r.problems.push_back({3,
                                BlockOwner(snap, names, *b) + " cannot be read until a server is "
                                    "repaired: " + data.status().message(),
                                false});
        }
        ++r.blocks_read;
        if (progress) progress(r.blocks_read, total);
        continue;
      }
      if (data.status().code() != Status::Code::kIntegrity) {
        r.fatal = data.status().WithContext("reading ORAM block " + std::to_string(id));
        return r;
      }
      for (const FsckSnapshot::Block* b : owners) {
        std::string m = BlockOwner(snap, names, *b) +
                        " is damaged: it does not authenticate (AEAD tag or version mismatch)";
        if (options.zero_damaged) {
          r.problems.push_back({3, m + "; it will read as zeros", true});
          r.repairs.push_back({FsckRepair::Kind::kSetValid, b->ino, b->idx, 0});
        } else {
          r.problems.push_back({3, m + " (--zero-damaged makes it read as zeros)", false});
        }
      }
      // Zeroed for good: the ORAM forgets the copy that no longer
      // authenticates, so the id reads as zeros without an access's
      // authentication and any later write to it (a partial one, or a
      // fragment of another file placed in it) starts from zeros instead of
      // failing on the damaged copy.
      if (options.zero_damaged) r.repairs.push_back({FsckRepair::Kind::kDeletePosition, id});
    }
    ++r.blocks_read;
    if (progress) progress(r.blocks_read, total);
  }
  return r;
}

}  // namespace s3oram::fs

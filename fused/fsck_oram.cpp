// Fsck phase 1 (fsck.h, CheckOram): the position map against the tree, the
// counters and the pending operations.
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
#include "oramcore/protocol/eviction_record.h"
#include "oramcore/state/sql.h"

namespace s3oram::fs {

using namespace fsck_detail;
using sql::FromSql;
using sql::ToSql;

// --- phase 1: the ORAM state ----------------------------------------------------

FsckPhaseResult CheckOram(const FsckSnapshot& snap, const FsckOptions& options) {
  FsckPhaseResult r;
  const OramParams& p = snap.params;
  const TreeGeometry geo = p.geometry();
  const PathNamer names(snap);
  // Blocks holding file data: losing their position loses data, so their
  // rows are deleted only with zero_damaged. Other rows (free, never written)
  // can go: nothing reads them.
  std::unordered_map<BlockId, const FsckSnapshot::Block*> written;
  for (const auto& b : snap.blocks) {
    if (b.valid > 0) written[b.id] = &b;
  }
  auto owner = [&](BlockId id) -> std::string {
    auto it = written.find(id);
    if (it == written.end()) return "block " + std::to_string(id) + " (holds no file data)";
    return BlockOwner(snap, names, *it->second);
  };
  auto drop = [&](BlockId id, std::string message, std::set<BlockId>& deleted) {
    const bool can = written.count(id) == 0 || options.zero_damaged;
    if (can && deleted.insert(id).second) {
      r.repairs.push_back({FsckRepair::Kind::kDeletePosition, id});
    }
    if (!can) message += "; its data cannot be recovered (--zero-damaged drops it)";
    r.problems.push_back({1, std::move(message), can});
  };
  std::set<BlockId> deleted;
  std::map<std::pair<BucketId, std::uint32_t>, std::vector<BlockId>> occupants;
  bool range_problem = false;
  for (const auto& row : snap.positions) {
    std::string why;
    if (row.id >= p.capacity_blocks) {
      why = "block id >= capacity " + std::to_string(p.capacity_blocks);
    } else if (row.leaf < 0 || !geo.is_leaf(static_cast<LeafId>(row.leaf))) {
      why = "leaf " + std::to_string(row.leaf) + " is not a leaf of a tree of height " +
            std::to_string(p.height) + " (leaves " + std::to_string(geo.first_leaf()) + ".." +
            std::to_string((geo.first_leaf() << 1) - 1) + ")";
    } else if (row.level < 0 || row.level > std::int64_t{p.height}) {
      why = "level " + std::to_string(row.level) + " outside 0.." + std::to_string(p.height);
    } else if (row.slot < 0 || row.slot >= std::int64_t{p.bucket_size}) {
      why = "slot " + std::to_string(row.slot) + " outside 0.." + std::to_string(p.bucket_size - 1);
    }
    if (!why.empty()) {
      range_problem = true;
      drop(row.id, "position of " + owner(row.id) + " is outside the tree: " + why, deleted);
      continue;
    }
    // (leaf, level) names the bucket on the path to leaf at that level, so a
    // row in range is on its path by construction.
    const auto level = static_cast<std::uint32_t>(row.level);
    const auto slot = static_cast<std::uint32_t>(row.slot);
    occupants[{geo.BucketOnPath(static_cast<LeafId>(row.leaf), level), slot}].push_back(row.id);
    if (level == 0 && slot >= snap.counters.nr) {
      // Root slots >= nr are rewritten by the next accesses: an entry there is stale.
      drop(row.id,
           "position of " + owner(row.id) + " is root slot " + std::to_string(slot) +
               ", but only slots below nr = " + std::to_string(snap.counters.nr) +
               " hold blocks since the last eviction",
           deleted);
    }
  }
  bool collision = false;
  for (const auto& [where, ids] : occupants) {
    if (ids.size() < 2) continue;
    collision = true;
    std::string list;
    for (BlockId id : ids) list += (list.empty() ? "" : ", ") + owner(id);
    std::vector<BlockId> holders;
    for (BlockId id : ids) {
      if (written.count(id) == 0) {
        if (deleted.insert(id).second) r.repairs.push_back({FsckRepair::Kind::kDeletePosition, id});
      } else {
        holders.push_back(id);
      }
    }
    std::string message = "bucket " + std::to_string(where.first) + " slot " +
                          std::to_string(where.second) + " is claimed by " +
                          std::to_string(ids.size()) + " blocks: " + list;
    bool fixed = holders.size() <= 1;
    if (!fixed && options.zero_damaged) {
      // At most one of them is really there and the map cannot tell which.
      for (BlockId id : holders) {
        if (deleted.insert(id).second) r.repairs.push_back({FsckRepair::Kind::kDeletePosition, id});
      }
      fixed = true;
    }
    if (!fixed) {
      message += "; the data of at most one can be recovered (--zero-damaged drops them)";
    }
    r.problems.push_back({1, std::move(message), fixed});
  }
  // What ClientStateStore::LoadPositionMap refuses (so OramClient::Open fails).
  r.position_map_loadable = !range_problem && !collision;

  // The tree's capacity bounds the live blocks (the overflow bound assumes
  // N <= A * 2^(H-1)); Open refuses parameters beyond it as well.
  if (p.evict_rate == 0 || p.capacity_blocks > p.max_capacity_blocks()) {
    r.problems.push_back({1,
                          "capacity " + std::to_string(p.capacity_blocks) +
                              " blocks exceeds what the tree holds (A * 2^(H-1) = " +
                              std::to_string(p.max_capacity_blocks()) + ")",
                          false});
  }
  const Counters& c = snap.counters;
  if (c.nr > p.evict_rate) {
    r.problems.push_back({1,
                          "counter nr = " + std::to_string(c.nr) +
                              " exceeds the eviction rate A = " + std::to_string(p.evict_rate),
                          false});
  }
  if (c.epoch == 0 || c.seq == 0) {
    r.problems.push_back(
        {1, "counters epoch/seq are zero: the state was never initialised", false});
  }
  std::uint64_t pending_roots = 0;
  for (const auto& op : snap.pending) {
    pending_roots += op.kind == kPendingRootKind && op.seq >= kPendingRootKey &&
                             op.payload.size() == PendingRootPayloadBytes(p.elems_per_slot())
                         ? 1
                         : 0;
  }
  for (const auto& op : snap.pending) {
    if (op.kind == kPendingEvictKind) {
      // Every format the client writes (oramcore/protocol/eviction_record.h):
      // a foreground eviction's 12 bytes, or a background one's with its plan.
      auto record = DecodeEvictionRecord(op.payload, p.geometry(), p.capacity_blocks);
      if (!record.ok()) {
        r.problems.push_back({1,
                              "pending eviction under key " + std::to_string(op.seq) +
                                  " is unreadable: " + record.status().message(),
                              false});
        continue;
      }
      const std::uint64_t ne = record->eviction;
      if (ne == c.ne && op.seq == ne) {
        r.notes.push_back("eviction " + std::to_string(ne) + " (attempt " +
                          std::to_string(record->attempt) + (record->plan ? ", background" : "") +
                          ") is pending (interrupted by a crash or an unmount); opening the "
                          "filesystem finishes it");
        continue;
      }
      r.problems.push_back({1,
                            "stray pending eviction " + std::to_string(ne) +
                                " does not match the eviction counter ne = " + std::to_string(c.ne),
                            false});
      continue;
    }
    if (op.kind == kPendingRootKind && op.seq >= kPendingRootKey &&
        op.payload.size() == PendingRootPayloadBytes(p.elems_per_slot())) {
      std::uint64_t slot = 0;
      for (int i = 0; i < 4; ++i)
        slot |= std::uint64_t{op.payload[static_cast<std::size_t>(i)]} << (8 * i);
      // The last accesses' deferred root writes: slots nr, nr + 1, ..., each
      // under the key of its slot (or, from before pipelining, the one
      // pending write under kPendingRootKey).
      const bool keyed = op.seq == kPendingRootKey + slot ||
                         (op.seq == kPendingRootKey && pending_roots == 1);
      if (keyed && slot >= c.nr && slot < c.nr + pending_roots && slot < p.evict_rate) {
        r.notes.push_back("an access's root write (root slot " + std::to_string(slot) +
                          ") is pending; opening the filesystem sends it");
        continue;
      }
      r.problems.push_back({1,
                            "stray pending root write for slot " + std::to_string(slot) +
                                " does not match the next root slot nr = " + std::to_string(c.nr),
                            false});
      continue;
    }
    r.problems.push_back(
        {1, "stray pending operation seq " + std::to_string(op.seq) + " of kind '" + op.kind + "'",
         false});
  }
  return r;
}

}  // namespace s3oram::fs

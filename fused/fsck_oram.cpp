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

namespace {

// The position map's rows against the tree: each in range, each slot held
// by one block. Repairs delete rows; a row of a block holding file data goes
// only with zero_damaged (losing its position loses data), other rows (free,
// never written) can go: nothing reads them.
class PositionCheck {
 public:
  PositionCheck(const FsckSnapshot& snap, const FsckOptions& options, FsckPhaseResult& r)
      : snap_(snap), options_(options), r_(r), names_(snap) {
    for (const auto& b : snap.blocks) {
      if (b.valid > 0) written_[b.id] = &b;
    }
  }

  // Whether ClientStateStore::LoadPositionMap would load the map (so
  // OramClient::Open would not fail).
  bool Run() {
    const bool range_problem = CheckRows();
    const bool collision = CheckCollisions();
    return !range_problem && !collision;
  }

 private:
  std::string Owner(BlockId id) const {
    auto it = written_.find(id);
    if (it == written_.end()) return "block " + std::to_string(id) + " (holds no file data)";
    return BlockOwner(snap_, names_, *it->second);
  }

  void Drop(BlockId id, std::string message) {
    const bool can = written_.count(id) == 0 || options_.zero_damaged;
    if (can && deleted_.insert(id).second) {
      r_.repairs.push_back({FsckRepair::Kind::kDeletePosition, id});
    }
    if (!can) message += "; its data cannot be recovered (--zero-damaged drops it)";
    r_.problems.push_back({1, std::move(message), can});
  }

  // Why a row is outside the tree; empty if it is inside.
  std::string OutOfRange(const FsckSnapshot::PositionRow& row, const TreeGeometry& geo) const {
    const OramParams& p = snap_.params;
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
    return why;
  }

  // Returns whether a row was out of range; collects the occupants of each
  // slot for CheckCollisions.
  bool CheckRows() {
    const TreeGeometry geo = snap_.params.geometry();
    bool range_problem = false;
    for (const auto& row : snap_.positions) {
      if (std::string why = OutOfRange(row, geo); !why.empty()) {
        range_problem = true;
        Drop(row.id, "position of " + Owner(row.id) + " is outside the tree: " + why);
        continue;
      }
      // (leaf, level) names the bucket on the path to leaf at that level, so a
      // row in range is on its path by construction.
      const auto level = static_cast<std::uint32_t>(row.level);
      const auto slot = static_cast<std::uint32_t>(row.slot);
      occupants_[{geo.BucketOnPath(static_cast<LeafId>(row.leaf), level), slot}].push_back(row.id);
      if (level == 0 && slot >= snap_.counters.nr) {
        // Root slots >= nr are rewritten by the next accesses: an entry there is stale.
        Drop(row.id, "position of " + Owner(row.id) + " is root slot " + std::to_string(slot) +
                         ", but only slots below nr = " + std::to_string(snap_.counters.nr) +
                         " hold blocks since the last eviction");
      }
    }
    return range_problem;
  }

  // Returns whether two blocks claimed one slot.
  bool CheckCollisions() {
    bool collision = false;
    for (const auto& [where, ids] : occupants_) {
      if (ids.size() < 2) continue;
      collision = true;
      std::string list;
      for (BlockId id : ids) list += (list.empty() ? "" : ", ") + Owner(id);
      std::vector<BlockId> holders;
      for (BlockId id : ids) {
        if (written_.count(id) == 0) {
          if (deleted_.insert(id).second) {
            r_.repairs.push_back({FsckRepair::Kind::kDeletePosition, id});
          }
        } else {
          holders.push_back(id);
        }
      }
      std::string message = "bucket " + std::to_string(where.first) + " slot " +
                            std::to_string(where.second) + " is claimed by " +
                            std::to_string(ids.size()) + " blocks: " + list;
      bool fixed = holders.size() <= 1;
      if (!fixed && options_.zero_damaged) {
        // At most one of them is really there and the map cannot tell which.
        for (BlockId id : holders) {
          if (deleted_.insert(id).second) {
            r_.repairs.push_back({FsckRepair::Kind::kDeletePosition, id});
          }
        }
        fixed = true;
      }
      if (!fixed) {
        message += "; the data of at most one can be recovered (--zero-damaged drops them)";
      }
      r_.problems.push_back({1, std::move(message), fixed});
    }
    return collision;
  }

  const FsckSnapshot& snap_;
  const FsckOptions& options_;
  FsckPhaseResult& r_;
  const PathNamer names_;
  std::unordered_map<BlockId, const FsckSnapshot::Block*> written_;  // blocks holding file data
  std::set<BlockId> deleted_;  // rows a repair deletes, each once
  std::map<std::pair<BucketId, std::uint32_t>, std::vector<BlockId>> occupants_;
};

void CheckParamsAndCounters(const OramParams& p, const Counters& c, FsckPhaseResult& r) {
  // The tree's capacity bounds the live blocks (the overflow bound assumes
  // N <= A * 2^(H-1)); Open refuses parameters beyond it as well.
  if (p.evict_rate == 0 || p.capacity_blocks > p.max_capacity_blocks()) {
    r.problems.push_back({1,
                          "capacity " + std::to_string(p.capacity_blocks) +
                              " blocks exceeds what the tree holds (A * 2^(H-1) = " +
                              std::to_string(p.max_capacity_blocks()) + ")",
                          false});
  }
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
}

bool IsPendingRootWrite(const FsckSnapshot::Pending& op, const OramParams& p) {
  return op.kind == kPendingRootKind && op.seq >= kPendingRootKey &&
         op.payload.size() == PendingRootPayloadBytes(p.elems_per_slot());
}

// Every format the client writes (oramcore/protocol/eviction_record.h): a
// foreground eviction's 12 bytes, or a background one's with its plan.
void CheckPendingEviction(const FsckSnapshot::Pending& op, const OramParams& p, const Counters& c,
                          FsckPhaseResult& r) {
  auto record = DecodeEvictionRecord(op.payload, p.geometry(), p.capacity_blocks);
  if (!record.ok()) {
    r.problems.push_back({1,
                          "pending eviction under key " + std::to_string(op.seq) +
                              " is unreadable: " + record.status().message(),
                          false});
    return;
  }
  const std::uint64_t ne = record->eviction;
  if (ne == c.ne && op.seq == ne) {
    r.notes.push_back("eviction " + std::to_string(ne) + " (attempt " +
                      std::to_string(record->attempt) + (record->plan ? ", background" : "") +
                      ") is pending (interrupted by a crash or an unmount); opening the "
                      "filesystem finishes it");
    return;
  }
  r.problems.push_back({1,
                        "stray pending eviction " + std::to_string(ne) +
                            " does not match the eviction counter ne = " + std::to_string(c.ne),
                        false});
}

// The last accesses' deferred root writes: slots nr, nr + 1, ..., each
// under the key of its slot (or, from before pipelining, the one pending
// write under kPendingRootKey).
void CheckPendingRootWrite(const FsckSnapshot::Pending& op, const OramParams& p, const Counters& c,
                           std::uint64_t pending_roots, FsckPhaseResult& r) {
  std::uint64_t slot = 0;
  for (int i = 0; i < 4; ++i)
    slot |= std::uint64_t{op.payload[static_cast<std::size_t>(i)]} << (8 * i);
  const bool keyed =
      op.seq == kPendingRootKey + slot || (op.seq == kPendingRootKey && pending_roots == 1);
  if (keyed && slot >= c.nr && slot < c.nr + pending_roots && slot < p.evict_rate) {
    r.notes.push_back("an access's root write (root slot " + std::to_string(slot) +
                      ") is pending; opening the filesystem sends it");
    return;
  }
  r.problems.push_back({1,
                        "stray pending root write for slot " + std::to_string(slot) +
                            " does not match the next root slot nr = " + std::to_string(c.nr),
                        false});
}

void CheckPending(const FsckSnapshot& snap, FsckPhaseResult& r) {
  const OramParams& p = snap.params;
  const Counters& c = snap.counters;
  std::uint64_t pending_roots = 0;
  for (const auto& op : snap.pending) pending_roots += IsPendingRootWrite(op, p) ? 1 : 0;
  for (const auto& op : snap.pending) {
    if (op.kind == kPendingEvictKind) {
      CheckPendingEviction(op, p, c, r);
    } else if (IsPendingRootWrite(op, p)) {
      CheckPendingRootWrite(op, p, c, pending_roots, r);
    } else {
      r.problems.push_back(
          {1,
           "stray pending operation seq " + std::to_string(op.seq) + " of kind '" + op.kind + "'",
           false});
    }
  }
}

}  // namespace

FsckPhaseResult CheckOram(const FsckSnapshot& snap, const FsckOptions& options) {
  FsckPhaseResult r;
  r.position_map_loadable = PositionCheck(snap, options, r).Run();
  CheckParamsAndCounters(snap.params, snap.counters, r);
  CheckPending(snap, r);
  return r;
}

}  // namespace s3oram::fs

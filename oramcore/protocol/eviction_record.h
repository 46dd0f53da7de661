// The state's record of an eviction under way (pending kind "evict", key =
// its number): which attempt the servers were last asked to prepare, and,
// for a background eviction, the plan the servers compute and where every
// block it moves was before it (the servers hold it there until the commit).
//
// A background eviction records its plan because the client's positions
// already say where the blocks will be (they were updated with the record),
// so the plan could not be computed again from them; and because accesses
// go on meanwhile and move blocks again. Format (little-endian):
//   eviction u64, attempt u32                       (all a record of format 1 holds)
//   format u8 = 2, leaf u64, steps u32, then per step:
//     source u64, target u64, Z u32, Z x row i32
//   moves u32, then per move: id u64, leaf u64, level u32, slot u32 (after),
//     level u32, slot u32 (before; the leaf does not change)
// Decode checks every field against the geometry and the capacity, so a
// damaged record is Corruption, never an out-of-range plan.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/tree/planner.h"
#include "oramcore/tree/position_map.h"

namespace s3oram {

struct EvictionRecord {
  std::uint64_t eviction = 0;
  std::uint32_t attempt = 0;
  // Background eviction (format 2): the plan, and each moved block's
  // position before it. Absent in format 1 (an eviction run to its end
  // while accesses waited; the plan follows from the positions).
  std::optional<EvictionPlan> plan;
  std::unordered_map<BlockId, Position> before;
};

std::vector<std::uint8_t> EncodeEvictionRecord(const EvictionRecord& r);
Result<EvictionRecord> DecodeEvictionRecord(const std::vector<std::uint8_t>& bytes,
                                            const TreeGeometry& geo, std::uint64_t capacity);

}  // namespace s3oram

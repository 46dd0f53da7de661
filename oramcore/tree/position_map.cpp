#include "oramcore/tree/position_map.h"

#include <string>
#include <utility>

namespace s3oram {

namespace {

using BucketMap = std::unordered_map<BucketId, std::vector<BlockId>>;

// Representation of a bucket's vector: entries [0, Z) are the slot occupants
// (kNoBlock when free), entry Z is the number of occupied slots. Keeping the
// load in the same allocation makes BucketLoad O(1) and lets Remove notice that
// a bucket became empty without scanning it.
std::size_t LoadIndex(const TreeGeometry& geo) { return geo.bucket_size; }

// Bound on the spare-node pool. One eviction empties at most the H + 1 path
// buckets and fills at most 2H buckets, one access empties at most one bucket
// and fills the root, so a few paths' worth of nodes covers the steady state.
std::size_t MaxSpare(const TreeGeometry& geo) { return 4 * std::size_t{geo.levels()} + 8; }

bool ValidPosition(const TreeGeometry& geo, const Position& pos) {
  return geo.is_leaf(pos.leaf) && pos.level <= geo.height && pos.slot < geo.bucket_size;
}

std::string Describe(const Position& pos) {
  return "(leaf " + std::to_string(pos.leaf) + ", level " + std::to_string(pos.level) +
         ", slot " + std::to_string(pos.slot) + ")";
}

// The vector of `bucket`, creating it (from the spare pool when possible) if the
// bucket holds no block yet.
std::vector<BlockId>& AcquireBucket(const TreeGeometry& geo, BucketMap& buckets,
                                    std::vector<BucketMap::node_type>& spare, BucketId bucket) {
  if (auto it = buckets.find(bucket); it != buckets.end()) return it->second;
  if (!spare.empty()) {
    // Spare nodes are stored cleared (all slots free, load 0); only the key changes.
    BucketMap::node_type node = std::move(spare.back());
    spare.pop_back();
    node.key() = bucket;
    return buckets.insert(std::move(node)).position->second;
  }
  std::vector<BlockId> slots(LoadIndex(geo) + 1, kNoBlock);
  slots[LoadIndex(geo)] = 0;
  return buckets.emplace(bucket, std::move(slots)).first->second;
}

// Frees (bucket, slot); the bucket's entry leaves the map when its load drops to 0.
void FreeSlot(const TreeGeometry& geo, BucketMap& buckets,
              std::vector<BucketMap::node_type>& spare, BucketId bucket, std::uint32_t slot) {
  auto it = buckets.find(bucket);
  // The caller only frees slots its entries say are held, and CheckInvariants
  // verifies that entries and buckets agree, so the bucket exists here.
  std::vector<BlockId>& slots = it->second;
  slots[slot] = kNoBlock;
  if (--slots[LoadIndex(geo)] != 0) return;
  if (spare.size() < MaxSpare(geo)) {
    spare.push_back(buckets.extract(it));  // already all kNoBlock with load 0
  } else {
    buckets.erase(it);
  }
}

}  // namespace

PositionMap::PositionMap(TreeGeometry geometry, std::uint64_t capacity_blocks)
    : geo_(geometry), entries_(capacity_blocks) {}

const PositionEntry* PositionMap::Find(BlockId id) const {
  if (id >= entries_.size() || entries_[id].pos.leaf == 0) return nullptr;
  return &entries_[id];
}

Status PositionMap::Place(BlockId id, Position pos, std::uint64_t version) {
  if (id >= entries_.size()) {
    return Status::InvalidArgument("block " + std::to_string(id) + " is beyond the capacity of " +
                                   std::to_string(entries_.size()) + " blocks");
  }
  if (!ValidPosition(geo_, pos)) {
    return Status::InvalidArgument("position " + Describe(pos) + " of block " +
                                   std::to_string(id) + " is outside a tree of height " +
                                   std::to_string(geo_.height) + " with Z = " +
                                   std::to_string(geo_.bucket_size));
  }
  const BucketId bucket = geo_.BucketOnPath(pos.leaf, pos.level);
  if (const BlockId holder = Occupant(bucket, pos.slot); holder != kNoBlock && holder != id) {
    return Status::FailedPrecondition("slot " + std::to_string(pos.slot) + " of bucket " +
                                      std::to_string(bucket) + " is held by block " +
                                      std::to_string(holder) + ", cannot place block " +
                                      std::to_string(id));
  }

  PositionEntry& entry = entries_[id];
  if (entry.pos.leaf != 0) {
    const BucketId old_bucket = geo_.BucketOnPath(entry.pos.leaf, entry.pos.level);
    if (old_bucket == bucket && entry.pos.slot == pos.slot) {
      // Same physical slot (possibly reached through another leaf below it).
      entry.pos = pos;
      entry.version = version;
      return Status::Ok();
    }
    FreeSlot(geo_, buckets_, spare_, old_bucket, entry.pos.slot);
  } else {
    ++live_;
  }
  std::vector<BlockId>& slots = AcquireBucket(geo_, buckets_, spare_, bucket);
  slots[pos.slot] = id;
  ++slots[LoadIndex(geo_)];
  entry.pos = pos;
  entry.version = version;
  return Status::Ok();
}

void PositionMap::Remove(BlockId id) {
  if (id >= entries_.size() || entries_[id].pos.leaf == 0) return;
  PositionEntry& entry = entries_[id];
  FreeSlot(geo_, buckets_, spare_, geo_.BucketOnPath(entry.pos.leaf, entry.pos.level),
           entry.pos.slot);
  // The version is kept: it only grows, so a later write of the same id can
  // continue from it (versions feed AEAD nonces, which must never repeat).
  entry.pos = Position{};
  --live_;
}

BlockId PositionMap::Occupant(BucketId bucket, std::uint32_t slot) const {
  if (slot >= geo_.bucket_size) return kNoBlock;
  auto it = buckets_.find(bucket);
  return it == buckets_.end() ? kNoBlock : it->second[slot];
}

std::span<const BlockId> PositionMap::BucketSlots(BucketId bucket) const {
  auto it = buckets_.find(bucket);
  if (it == buckets_.end()) return {};
  return std::span<const BlockId>(it->second.data(), geo_.bucket_size);
}

std::uint32_t PositionMap::BucketLoad(BucketId bucket) const {
  auto it = buckets_.find(bucket);
  return it == buckets_.end() ? 0u : static_cast<std::uint32_t>(it->second[LoadIndex(geo_)]);
}

Status PositionMap::CheckInvariants() const {
  const std::uint32_t Z = geo_.bucket_size;
  // Direction 1: every placed block is where its bucket says it is.
  std::uint64_t placed = 0;
  for (BlockId id = 0; id < entries_.size(); ++id) {
    const Position& pos = entries_[id].pos;
    if (pos.leaf == 0) continue;
    ++placed;
    if (!ValidPosition(geo_, pos)) {
      return Status::Corruption("block " + std::to_string(id) + " has invalid position " +
                                Describe(pos));
    }
    const BucketId bucket = geo_.BucketOnPath(pos.leaf, pos.level);
    if (Occupant(bucket, pos.slot) != id) {
      return Status::Corruption("block " + std::to_string(id) + " maps to " + Describe(pos) +
                                " = bucket " + std::to_string(bucket) +
                                " but that slot holds " +
                                std::to_string(Occupant(bucket, pos.slot)));
    }
  }
  if (placed != live_) {
    return Status::Corruption("live block count is " + std::to_string(live_) + " but " +
                              std::to_string(placed) + " blocks are placed");
  }
  // Direction 2: every occupied slot belongs to a block that maps to it. With
  // direction 1 this makes the relation a bijection between placed blocks and
  // occupied slots (so no two blocks share a slot).
  std::uint64_t occupied = 0;
  for (const auto& [bucket, slots] : buckets_) {
    if (bucket == 0 || bucket > geo_.num_buckets()) {
      return Status::Corruption("bucket " + std::to_string(bucket) + " is outside the tree");
    }
    if (slots.size() != std::size_t{Z} + 1) {
      return Status::Corruption("bucket " + std::to_string(bucket) + " has " +
                                std::to_string(slots.size()) + " entries, expected Z + 1");
    }
    std::uint64_t load = 0;
    for (std::uint32_t s = 0; s < Z; ++s) {
      const BlockId id = slots[s];
      if (id == kNoBlock) continue;
      ++load;
      const PositionEntry* e = Find(id);
      if (e == nullptr || geo_.BucketOnPath(e->pos.leaf, e->pos.level) != bucket ||
          e->pos.slot != s) {
        return Status::Corruption("slot " + std::to_string(s) + " of bucket " +
                                  std::to_string(bucket) + " holds block " + std::to_string(id) +
                                  " which does not map there");
      }
    }
    if (load != slots[Z]) {
      return Status::Corruption("bucket " + std::to_string(bucket) + " records load " +
                                std::to_string(slots[Z]) + " but holds " + std::to_string(load) +
                                " blocks");
    }
    if (load == 0) {
      return Status::Corruption("empty bucket " + std::to_string(bucket) + " is still indexed");
    }
    occupied += load;
  }
  if (occupied != live_) {
    return Status::Corruption(std::to_string(occupied) + " slots are occupied but " +
                              std::to_string(live_) + " blocks are live");
  }
  for (const auto& node : spare_) {
    const std::vector<BlockId>& slots = node.mapped();
    if (slots.size() != std::size_t{Z} + 1 || slots[Z] != 0) {
      return Status::Corruption("a spare bucket node is not cleared");
    }
    for (std::uint32_t s = 0; s < Z; ++s) {
      if (slots[s] != kNoBlock) return Status::Corruption("a spare bucket node is not cleared");
    }
  }
  return Status::Ok();
}

}  // namespace s3oram

// BlockLayout: how a file block sits in the ORAM's fixed-size blocks.
//
// A file is cut into file blocks of block_bytes (the ORAM block size). Each
// ORAM block is divided into slots_per_block equal slots. A file block is
// stored either
//  * whole: an ORAM block of its own (Extent::slots == 0), or
//  * as a fragment: slots [slot, slot + slots) of a *shared* ORAM block
//    whose other slots hold other files' fragments (0 < slots <
//    slots_per_block).
// Either way the extent holds the leading Bytes(extent) bytes of the file
// block; every byte past them reads as zero. So small files and file tails
// cost a few slots, not a block, and several of them are written back in one
// ORAM access when they share a block. A layout with one slot per block
// (4 KiB blocks) has whole blocks only.
//
// Pure arithmetic; no I/O.
#pragma once

#include <algorithm>
#include <cstdint>

namespace s3oram::fs {

using BlockId = std::uint64_t;

struct Extent {
  BlockId id = 0;
  std::uint32_t slot = 0;   // first slot (0 for a whole block)
  std::uint32_t slots = 0;  // slot count; 0 means the whole block
  bool operator==(const Extent&) const = default;
  bool whole() const { return slots == 0; }
};

class BlockLayout {
 public:
  // Slots are 4 KiB (the kernel's page) unless that makes more than 64 per
  // block (a shared block's slot map is one 64-bit word); blocks that are
  // not a multiple of the slot size are never shared.
  static constexpr std::uint32_t kMaxSlots = 64;
  static constexpr std::uint32_t kMinSlotBytes = 4096;

  static std::uint32_t SlotsPerBlock(std::uint32_t block_bytes) {
    if (block_bytes < 2 * kMinSlotBytes) return 1;
    const std::uint32_t n = std::min(kMaxSlots, block_bytes / kMinSlotBytes);
    return block_bytes % n == 0 ? n : 1;
  }

  explicit BlockLayout(std::uint32_t block_bytes)
      : block_bytes_(block_bytes),
        slots_per_block_(SlotsPerBlock(block_bytes)),
        slot_bytes_(block_bytes / SlotsPerBlock(block_bytes)) {}

  std::uint32_t block_bytes() const { return block_bytes_; }
  std::uint32_t slots_per_block() const { return slots_per_block_; }
  std::uint32_t slot_bytes() const { return slot_bytes_; }
  bool shares_blocks() const { return slots_per_block_ > 1; }

  // Bytes of the file block the extent holds.
  std::uint32_t Bytes(const Extent& e) const {
    return e.whole() ? block_bytes_ : e.slots * slot_bytes_;
  }
  // Where the extent starts inside its ORAM block.
  std::uint32_t Offset(const Extent& e) const { return e.whole() ? 0 : e.slot * slot_bytes_; }

  // Slots needed to hold the first `bytes` bytes of a file block; 0 (the
  // whole block) when a fragment would take every slot.
  std::uint32_t SlotsFor(std::uint32_t bytes) const {
    const std::uint32_t n = (bytes + slot_bytes_ - 1) / slot_bytes_;
    return n >= slots_per_block_ ? 0 : std::max<std::uint32_t>(n, 1);
  }

  // Does an extent of `slots` (0: whole) hold the first `bytes` bytes?
  bool Holds(std::uint32_t slots, std::uint32_t bytes) const {
    return slots == 0 || static_cast<std::uint64_t>(slots) * slot_bytes_ >= bytes;
  }

  // The slot mask of a fragment (bit i = slot i).
  static std::uint64_t Mask(std::uint32_t slot, std::uint32_t slots) {
    const std::uint64_t ones = slots >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << slots) - 1;
    return ones << slot;
  }

  // The first run of `slots` free slots in a block whose used slots are
  // `used`, or -1. (First fit keeps a block's free space in one piece.)
  int FirstFit(std::uint64_t used, std::uint32_t slots) const {
    if (slots == 0 || slots > slots_per_block_) return -1;
    for (std::uint32_t s = 0; s + slots <= slots_per_block_; ++s) {
      if ((used & Mask(s, slots)) == 0) return static_cast<int>(s);
    }
    return -1;
  }
  // The longest run of free slots in a block whose used slots are `used`.
  std::uint32_t LongestFree(std::uint64_t used) const {
    std::uint32_t best = 0, run = 0;
    for (std::uint32_t s = 0; s < slots_per_block_; ++s) {
      run = (used >> s) & 1 ? 0 : run + 1;
      best = std::max(best, run);
    }
    return best;
  }

 private:
  std::uint32_t block_bytes_;
  std::uint32_t slots_per_block_;
  std::uint32_t slot_bytes_;
};

}  // namespace s3oram::fs

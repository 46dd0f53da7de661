#include "oramcore/wire/message_limits.h"

#include <algorithm>
#include <initializer_list>

#include "oramcore/math/elem_packing.h"

namespace s3oram::wire {
namespace {

// Header, fixed fields, vector length prefixes and flags: far below this.
constexpr std::uint64_t kAllowance = std::uint64_t{64} << 10;

std::uint64_t Packed(std::uint64_t elems) { return PackedElemBytes(elems); }

std::uint64_t Max(std::initializer_list<std::uint64_t> v) { return std::max(v); }

}  // namespace

std::uint64_t RebuildRangeBuckets(const StoreShape& shape, std::uint64_t wanted_bytes) {
  const std::uint64_t bucket_bytes =
      std::uint64_t{shape.bucket_size} * shape.elems_per_slot * sizeof(Elem);
  if (bucket_bytes == 0) return 1;
  return std::max<std::uint64_t>(1, std::min(wanted_bytes, kMaxRangeBytes) / bucket_bytes);
}

MessageLimits LimitsFor(const StoreShape& shape, std::uint32_t /*parties*/) {
  const std::uint64_t H = shape.height, Z = shape.bucket_size, m = shape.elems_per_slot;
  const std::uint64_t bucket = Z * m;
  const std::uint64_t path_slots = (H + 1) * Z;
  // A rebuild range: its buckets' shares (and one flag per bucket).
  const std::uint64_t range_buckets = RebuildRangeBuckets(shape, kMaxRangeBytes);
  const std::uint64_t range_bytes = Packed(range_buckets * bucket) + range_buckets;
  // SCRUB, PARITY, AGE_FILL: a range of at most kMaxScrubBytes of share file
  // (unless one bucket): a flag per slot and two digest elements per slot.
  const std::uint64_t scrub_buckets = std::max<std::uint64_t>(
      1, kMaxScrubBytes / std::max<std::uint64_t>(1, bucket * sizeof(Elem)));
  const std::uint64_t scrub_reply =
      scrub_buckets * Z + Packed(scrub_buckets * Z * kParityElemsPerSlot);
  // An eviction's bucket list: the path and its siblings, and the spare places.
  const std::uint64_t evicted_buckets = 2 * (H + 1) + 2 * std::max<std::uint64_t>(H, 1);

  MessageLimits l;
  l.request_bytes = kAllowance + Max({
                                     kSmallMessageBytes,
                                     Packed(path_slots) + Packed(m),  // RETRIEVE_WRITE_ROOT
                                     Packed((H + 1) * 2 * Z * Z),     // EVICT_PREPARE
                                     Packed(kMaxBackupChunkElems),    // BACKUP_PUT
                                 });
  l.reply_bytes = kAllowance + Max({
                                   kSmallMessageBytes,
                                   Packed(m),                     // RETRIEVE
                                   Packed(kMaxBackupChunkElems),  // BACKUP_GET
                                   scrub_reply,                   // SCRUB, PARITY
                                   Packed(evicted_buckets * Z * kParityElemsPerSlot) +
                                       Packed(kEvictCheckCombinations * m),  // EVICT_CHECK
                               });
  l.peer_bytes = kAllowance + Max({
                                  Packed(2 * bucket),  // SMP_SHARES of the leaf round
                                  range_bytes,         // REBUILD_TERMS
                              });
  return l;
}

}  // namespace s3oram::wire

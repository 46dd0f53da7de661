// The per-socket frame limits (oramcore/wire/message_limits.h) hold every
// message the protocol produces: the largest instance of each kind, encoded,
// fits its direction's limit, for small and paper-sized shapes.
#include "oramcore/wire/message_limits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "oramcore/wire/wire.h"

namespace s3oram::wire {
namespace {

std::vector<Elem> Elems(std::uint64_t n) { return std::vector<Elem>(n, 1); }

std::uint64_t Size(const Body& body) {
  Header h;
  return Encode(h, body).size();
}

void CheckShape(const StoreShape& shape, std::uint32_t parties) {
  SCOPED_TRACE("H " + std::to_string(shape.height) + ", Z " + std::to_string(shape.bucket_size) +
               ", m " + std::to_string(shape.elems_per_slot));
  const MessageLimits l = LimitsFor(shape, parties);
  const std::uint64_t H = shape.height, Z = shape.bucket_size, m = shape.elems_per_slot;
  const std::uint64_t bucket = Z * m;
  const std::uint64_t range = RebuildRangeBuckets(shape, ~std::uint64_t{0});
  // Requests.
  EXPECT_LE(Size(RetrieveWriteRootRequest{0, Elems(m), 0, Elems((H + 1) * Z), {}, {}}),
            l.request_bytes);
  EXPECT_LE(Size(EvictPrepareRequest{0, 0, 0, Elems((H + 1) * 2 * Z * Z), {}}), l.request_bytes);
  RebuildWriteRequest rw;
  rw.holes.assign(range, 0);
  rw.participants.assign(parties, 0);
  EXPECT_LE(Size(rw), l.request_bytes);
  EXPECT_LE(Size(BackupPutRequest{0, 0, 0, false, Elems(kMaxBackupChunkElems)}), l.request_bytes);
  // Replies.
  EXPECT_LE(Size(RetrieveReply{Elems(m)}), l.reply_bytes);
  EXPECT_LE(Size(RebuildReadReply{0, std::vector<std::uint8_t>(range, 0)}), l.reply_bytes);
  EXPECT_LE(Size(BackupGetReply{0, 0, Elems(kMaxBackupChunkElems)}), l.reply_bytes);
  const std::uint64_t scrub = std::max<std::uint64_t>(1, kMaxScrubBytes / (bucket * sizeof(Elem)));
  EXPECT_LE(Size(ParityReply{0, std::vector<std::uint8_t>(scrub * Z, 0),
                             Elems(scrub * Z * kParityElemsPerSlot)}),
            l.reply_bytes);
  const std::uint64_t evicted = 2 * (H + 1) + 2 * std::max<std::uint64_t>(H, 1);
  EXPECT_LE(Size(EvictCheckReply{0, Elems(evicted * Z * kParityElemsPerSlot),
                                 Elems(kEvictCheckCombinations * m)}),
            l.reply_bytes);
  // Between servers: the leaf round carries two buckets; a rebuild range's
  // terms go from a survivor to the target.
  const std::uint64_t smp = Size(SmpShares{0, 0, 0, 0, Elems(2 * bucket)});
  const std::uint64_t terms =
      Size(RebuildTerms{0, {}, 0, 0, std::vector<std::uint8_t>(range, 0), Elems(range * bucket)});
  EXPECT_LE(smp, l.peer_bytes);
  EXPECT_LE(terms, l.peer_bytes);
  // And the limits are not loose by orders of magnitude: within twice the
  // largest peer message plus the allowance.
  EXPECT_LT(l.peer_bytes, 2 * std::max(smp, terms) + (128 << 10));
}

TEST(MessageLimitsTest, EveryMessageOfTheProtocolFitsItsSocketsLimit) {
  CheckShape(StoreShape{3, 8, 16}, 3);      // the tests' small stores
  CheckShape(StoreShape{10, 60, 1100}, 3);  // 4 KiB blocks
  CheckShape(StoreShape{14, 96, 8460}, 3);  // 256 KiB blocks, the defaults' order
  CheckShape(StoreShape{6, 8, 16}, 5);      // five servers
}

TEST(MessageLimitsTest, ARebuildRangeIsAtLeastOneBucketAndAtMostTheCap) {
  const StoreShape huge{4, 512, 70000};  // one bucket is 143 MB
  EXPECT_EQ(RebuildRangeBuckets(huge, kMaxRangeBytes), 1u);
  const StoreShape small{3, 8, 16};
  EXPECT_EQ(RebuildRangeBuckets(small, ~std::uint64_t{0}), kMaxRangeBytes / (8 * 16 * 4));
  EXPECT_EQ(RebuildRangeBuckets(small, 8 * 16 * 4 * 10), 10u);
}

}  // namespace
}  // namespace s3oram::wire

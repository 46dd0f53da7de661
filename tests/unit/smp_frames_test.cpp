// SplitIntoFrames (serverd/smp_frames.h), the fused SMP split-and-encode,
// against the plain definition: every frame decodes as SMP_SHARES with the
// round's fields, every frame is byte for byte what the generic encoder
// (wire::Encode) makes of its decoded shares, and the parties' shares form a
// degree-t sharing of lambda * product (every window of t + 1 parties
// recovers lambda * product). Sizes straddle the chunk size and the 8-element packing.
#include "serverd/smp_frames.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/math/shamir.h"
#include "oramcore/wire/wire.h"
#include "tests/support/test_seed.h"

namespace s3oram::serverd {
namespace {

using field::Elem;

std::vector<Elem> Uniform(std::mt19937_64& rng, std::size_t n) {
  std::uniform_int_distribution<Elem> dist(0, field::kPrime - 1);
  std::vector<Elem> v(n);
  for (Elem& e : v) e = dist(rng);
  return v;
}

// `to`: the parties that get a frame (bit p); 0 means every party.
void CheckSplit(std::mt19937_64& rng, std::size_t n, std::size_t parties, std::size_t t,
                std::uint32_t me, std::uint32_t to = 0) {
  if (to == 0) to = (1u << parties) - 1;
  SCOPED_TRACE("n=" + std::to_string(n) + " parties=" + std::to_string(parties) +
               " t=" + std::to_string(t) + " me=" + std::to_string(me) +
               " to=" + std::to_string(to));
  const std::vector<Elem> product = Uniform(rng, n);
  const Elem lambda = Uniform(rng, 1)[0];
  wire::Header h;
  h.fs_id[0] = 7;
  h.epoch = 3;
  h.seq = 11;
  const wire::SmpShares fields{42, 2, 1, me, {}};
  SmpFrames out;
  SplitIntoFrames(h, fields, product, lambda, t, parties, me, to, out);
  ASSERT_EQ(out.frames.size(), parties);
  ASSERT_EQ(out.own.size(), n);

  std::vector<std::vector<Elem>> shares(parties);
  std::vector<std::size_t> holders;  // me and every party sent a frame
  for (std::size_t p = 0; p < parties; ++p) {
    if (p == me) {
      EXPECT_TRUE(out.frames[p].empty());
      shares[p] = out.own;
      holders.push_back(p);
      continue;
    }
    if (((to >> p) & 1u) == 0) {
      EXPECT_TRUE(out.frames[p].empty()) << "party " << p << " takes no part";
      continue;
    }
    holders.push_back(p);
    wire::Header got_h;
    wire::SmpShares got;
    const Status st = wire::DecodeSmpSharesInto(out.frames[p], &got_h, &got);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(got_h.fs_id, h.fs_id);
    EXPECT_EQ(got_h.epoch, h.epoch);
    EXPECT_EQ(got_h.seq, h.seq);
    EXPECT_EQ(got.eviction, 42u);
    EXPECT_EQ(got.attempt, 2u);
    EXPECT_EQ(got.round, 1u);
    EXPECT_EQ(got.from_index, me);
    ASSERT_EQ(got.shares.size(), n);
    // The generic encoder (wire::Encode over the message's Fields) is the
    // reference: it shares no code with the chunked frame writer.
    wire::SmpShares as_message = fields;
    as_message.shares = got.shares;
    EXPECT_EQ(wire::Encode(h, wire::Body{as_message}), out.frames[p]) << "party " << p;
    shares[p] = std::move(got.shares);
  }

  std::vector<Elem> want(n);
  for (std::size_t j = 0; j < n; ++j) want[j] = field::Mul(lambda, product[j]);
  // Every window of t + 1 consecutive holders (wrapping) recovers the same.
  for (std::size_t first = 0; first < holders.size(); ++first) {
    std::vector<Elem> xs;
    std::vector<const Elem*> ptrs;
    for (std::size_t k = 0; k <= t; ++k) {
      const std::size_t p = holders[(first + k) % holders.size()];
      xs.push_back(shamir::PartyX(p));
      ptrs.push_back(shares[p].data());
    }
    auto lagrange = shamir::LagrangeAtZero(xs);
    ASSERT_TRUE(lagrange.ok());
    std::vector<Elem> got(n);
    shamir::Recover(ptrs, *lagrange, n, got.data());
    ASSERT_EQ(got, want) << "subset starting at party " << first;
  }
}

TEST(SmpFramesTest, FramesAreTheEncodedSharesOfADegreeTSharing) {
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  for (const std::size_t n :
       {std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9}, std::size_t{16383},
        std::size_t{16384}, std::size_t{16385}, std::size_t{50001}}) {
    for (std::uint32_t me = 0; me < 3; ++me) CheckSplit(rng, n, 3, 1, me);
  }
  CheckSplit(rng, 40000, 5, 2, 4);
  CheckSplit(rng, 40000, 5, 2, 0);
}

// An eviction among some of the parties (the client excluded the others):
// no frame for those, and the participants' shares are one sharing.
TEST(SmpFramesTest, OnlyTheParticipantsGetFrames) {
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  CheckSplit(rng, 20000, 4, 1, 0, 0b0111);
  CheckSplit(rng, 20000, 4, 1, 3, 0b1011);
  CheckSplit(rng, 9, 4, 1, 2, 0b1110);
  CheckSplit(rng, 20000, 5, 2, 1, 0b11110);
}

TEST(SmpFramesTest, EmptyProductGivesEmptySharesInWellFormedFrames) {
  std::mt19937_64 rng(1);
  CheckSplit(rng, 0, 3, 1, 1);
}

}  // namespace
}  // namespace s3oram::serverd

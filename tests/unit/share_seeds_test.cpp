// Seeded shares (oramcore/wire/share_seeds.h, protocol/fresh_shares.h): a
// share sent as its seed expands to what the client drew, the sharing with
// it is a degree-1 sharing of the secret (any two parties recover it), every
// sharing draws a new seed, and a server refuses a seed it cannot expand.
#include "oramcore/wire/share_seeds.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "oramcore/math/random_elems.h"
#include "oramcore/math/shamir.h"
#include "oramcore/protocol/fresh_shares.h"

namespace s3oram {
namespace {

using field::Elem;

std::vector<Elem> Recover2(const std::vector<Elem>& a, std::size_t pa, const std::vector<Elem>& b,
                           std::size_t pb) {
  const std::array<Elem, 2> xs = {shamir::PartyX(pa), shamir::PartyX(pb)};
  auto lambda = shamir::LagrangeAtZero(xs);
  EXPECT_TRUE(lambda.ok());
  const std::array<const Elem*, 2> two = {a.data(), b.data()};
  std::vector<Elem> out(a.size());
  shamir::Recover(two, *lambda, a.size(), out.data());
  return out;
}

TEST(ShareSeedsTest, ASeededShareAndAnyOtherRecoverTheSecret) {
  for (std::size_t parties : {3u, 4u, 5u}) {
    std::vector<Elem> secret(1000);
    random::Elems(secret);
    std::vector<std::vector<Elem>> shares(parties);
    wire::ShareSeed seed;
    ShareVectorSeeded(secret, 1, shares, seed);
    ASSERT_EQ(seed.count, secret.size());
    EXPECT_TRUE(shares[kSeededParty].empty()) << "the seeded party's share is sent as its seed";
    shares[kSeededParty] = wire::ExpandShareSeed(seed);
    for (std::size_t a = 0; a < parties; ++a) {
      for (std::size_t b = a + 1; b < parties; ++b) {
        ASSERT_EQ(Recover2(shares[a], a, shares[b], b), secret)
            << parties << ": " << a << ", " << b;
      }
    }
    // A second sharing of the same secret: another seed, other shares.
    std::vector<std::vector<Elem>> again(parties);
    wire::ShareSeed seed2;
    ShareVectorSeeded(secret, 1, again, seed2);
    EXPECT_NE(seed2.seed, seed.seed);
    EXPECT_NE(again[1], shares[1]);
  }
  // t other than 1: no seed, every share in full.
  std::vector<Elem> secret(10, 7);
  std::vector<std::vector<Elem>> shares(5);
  wire::ShareSeed seed;
  ShareVectorSeeded(secret, 2, shares, seed);
  EXPECT_EQ(seed.count, 0u);
  for (const auto& s : shares) EXPECT_EQ(s.size(), secret.size());
}

TEST(ShareSeedsTest, AServerExpandsEverySeedAndRefusesOnesItCannot) {
  const wire::ShareSeed seed = wire::NewShareSeed(77);
  const std::vector<Elem> drawn = wire::ExpandShareSeed(seed);
  ASSERT_EQ(drawn.size(), 77u);
  EXPECT_EQ(wire::ExpandShareSeed(seed), drawn) << "the same seed expands the same way";

  wire::Message m;
  m.body = wire::RetrieveWriteRootRequest{3, {}, 9, {1, 2, 3}, seed, {}};
  ASSERT_TRUE(wire::ExpandShareSeeds(m).ok());
  const auto& rw = std::get<wire::RetrieveWriteRootRequest>(m.body);
  EXPECT_EQ(rw.share, drawn);
  EXPECT_EQ(rw.select, (std::vector<Elem>{1, 2, 3})) << "elements sent as such are kept";
  EXPECT_EQ(rw.share_seed, wire::ShareSeed{});

  m.body = wire::EvictPrepareRequest{1, 1, 2, {}, seed};
  ASSERT_TRUE(wire::ExpandShareSeeds(m).ok());
  EXPECT_EQ(std::get<wire::EvictPrepareRequest>(m.body).matrices, drawn);
  m.body = wire::WriteRootRequest{0, {}, seed};
  ASSERT_TRUE(wire::ExpandShareSeeds(m).ok());
  EXPECT_EQ(std::get<wire::WriteRootRequest>(m.body).share, drawn);

  // Refused: a seed beside elements, a seed with no count, a count past the
  // wire's vector limit (a server would allocate it).
  m.body = wire::RetrieveRequest{5, {1}, seed};
  Status both = wire::ExpandShareSeeds(m);
  EXPECT_EQ(both.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(both.message().find("select: both elements and a seed"), std::string::npos)
      << both.ToString();
  wire::ShareSeed no_count = seed;
  no_count.count = 0;
  m.body = wire::RetrieveRequest{5, {}, no_count};
  EXPECT_EQ(wire::ExpandShareSeeds(m).code(), Status::Code::kInvalidArgument);
  wire::ShareSeed huge = seed;
  huge.count = static_cast<std::uint32_t>(wire::kMaxElems + 1);
  m.body = wire::WriteRootRequest{0, {}, huge};
  Status too_many = wire::ExpandShareSeeds(m);
  EXPECT_EQ(too_many.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(too_many.message().find("more than"), std::string::npos) << too_many.ToString();
}

}  // namespace
}  // namespace s3oram

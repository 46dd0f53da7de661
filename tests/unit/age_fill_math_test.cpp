// age_fill::BucketShares against the definition: the parties' shares of a
// bucket are degree-t sharings of zero (any t + 1 of them interpolate to 0
// at x = 0), the same seed and bucket give the same shares, and buckets and
// seeds give unrelated ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "oramcore/math/age_fill.h"
#include "oramcore/math/shamir.h"

namespace s3oram {
namespace {

using field::Elem;

std::vector<Elem> Shares(const age_fill::Seed& seed, std::uint64_t bucket, std::size_t t,
                         std::size_t party, std::size_t n = 1000) {
  std::vector<Elem> out(n, 99);
  age_fill::BucketShares(seed, bucket, t, party, out);
  return out;
}

TEST(AgeFillMath, PartiesHoldConsistentSharingsOfZero) {
  age_fill::Seed seed{};
  seed[0] = 1;
  for (std::size_t t : {std::size_t{1}, std::size_t{2}}) {
    const std::size_t parties = 2 * t + 1;
    std::vector<std::vector<Elem>> shares;
    std::vector<Elem> xs;
    for (std::size_t i = 0; i < parties; ++i) {
      shares.push_back(Shares(seed, 5, t, i));
      xs.push_back(shamir::PartyX(i));
      for (Elem e : shares.back()) ASSERT_LT(e, field::kPrime);
    }
    // Every set of t + 1 parties opens zero: one polynomial of degree t.
    for (std::size_t first = 0; first + t < parties; ++first) {
      std::vector<Elem> sub_x(xs.begin() + static_cast<std::ptrdiff_t>(first),
                              xs.begin() + static_cast<std::ptrdiff_t>(first + t + 1));
      auto lambda = shamir::LagrangeAtZero(sub_x);
      ASSERT_TRUE(lambda.ok());
      std::vector<const Elem*> rows;
      for (std::size_t i = first; i <= first + t; ++i) rows.push_back(shares[i].data());
      std::vector<Elem> opened(shares[0].size(), 1);
      shamir::Recover(rows, *lambda, opened.size(), opened.data());
      EXPECT_TRUE(std::all_of(opened.begin(), opened.end(), [](Elem e) { return e == 0; }))
          << "t = " << t << ", parties from " << first;
    }
    // Not the all-zero holes of a new tree.
    EXPECT_GT(std::count_if(shares[0].begin(), shares[0].end(), [](Elem e) { return e != 0; }),
              990);
  }
}

TEST(AgeFillMath, DeterministicPerSeedAndBucket) {
  age_fill::Seed seed{}, other{};
  seed[3] = 7;
  other[3] = 8;
  EXPECT_EQ(Shares(seed, 9, 1, 0), Shares(seed, 9, 1, 0));
  EXPECT_NE(Shares(seed, 9, 1, 0), Shares(seed, 10, 1, 0));
  EXPECT_NE(Shares(seed, 9, 1, 0), Shares(other, 9, 1, 0));
  EXPECT_NE(Shares(seed, 9, 1, 0), Shares(seed, 9, 1, 1));
}

}  // namespace
}  // namespace s3oram

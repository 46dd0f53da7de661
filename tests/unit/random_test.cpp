// The CSPRNG front end: uniform output, no repeats, canonical field elements,
// on both the direct (small) and the keystream (large) paths.
#include "oramcore/base/random.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <set>
#include <vector>

#include "oramcore/math/random_elems.h"

namespace s3oram {
namespace {

// Upper 1e-6 quantile of chi-square with k degrees of freedom (Wilson-Hilferty).
double ChiSquareCritical(double k) {
  const double z = 4.753, h = 2.0 / (9.0 * k);
  return k * std::pow(1 - h + z * std::sqrt(h), 3);
}

double ByteChiSquare(const std::vector<std::uint8_t>& v) {
  std::array<double, 256> count{};
  for (auto b : v) count[b] += 1;
  const double e = double(v.size()) / 256;
  double chi = 0;
  for (double c : count) chi += (c - e) * (c - e) / e;
  return chi;
}

TEST(RandomTest, BytesAreUniformOnBothPaths) {
  for (std::size_t size : {std::size_t{64}, std::size_t{256}, std::size_t{257}, std::size_t{1} << 20}) {
    std::vector<std::uint8_t> all;
    while (all.size() < (std::size_t{1} << 20)) {
      std::vector<std::uint8_t> v(size);
      random::Bytes(v);
      all.insert(all.end(), v.begin(), v.end());
    }
    EXPECT_LT(ByteChiSquare(all), ChiSquareCritical(255)) << "request size " << size;
  }
}

TEST(RandomTest, CallsNeverRepeat) {
  // Large requests use a fresh key each: two calls must differ (and not be
  // shifted copies of one keystream).
  std::set<std::vector<std::uint8_t>> seen;
  for (int i = 0; i < 64; ++i) {
    std::vector<std::uint8_t> v(4096);
    random::Bytes(v);
    EXPECT_TRUE(seen.insert(std::vector<std::uint8_t>(v.begin(), v.begin() + 32)).second);
    EXPECT_TRUE(seen.insert(std::vector<std::uint8_t>(v.end() - 32, v.end())).second);
  }
}

TEST(RandomTest, ElemsAreCanonicalAndCoverTheField) {
  std::vector<field::Elem> v(1 << 20);
  random::Elems(v);
  std::uint64_t high = 0;
  for (auto e : v) {
    ASSERT_LT(e, field::kPrime);
    high += e >> 30;  // top bit of 31 is set half the time
  }
  const double mean = double(v.size()) / 2, sd = std::sqrt(double(v.size()) / 4);
  EXPECT_LT(std::fabs(double(high) - mean), 6 * sd);
}

TEST(RandomTest, BelowStaysInRangeAndIsUniform) {
  for (std::uint64_t bound : {std::uint64_t{1}, std::uint64_t{7}, std::uint64_t{1} << 40}) {
    for (int i = 0; i < 1000; ++i) ASSERT_LT(random::Below(bound), bound);
  }
  std::array<double, 6> count{};
  const int n = 60000;
  for (int i = 0; i < n; ++i) count[random::Below(6)] += 1;
  double chi = 0;
  for (double c : count) chi += (c - n / 6.0) * (c - n / 6.0) / (n / 6.0);
  EXPECT_LT(chi, ChiSquareCritical(5));
}

}  // namespace
}  // namespace s3oram

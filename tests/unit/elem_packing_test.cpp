#include "oramcore/math/elem_packing.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "tests/support/test_seed.h"

namespace s3oram::wire {
namespace {

using field::Elem;
using field::kPrime;

// Independent reference: one bit at a time, bit 31 i + k of the string is
// bit k of element i, byte j holds bits 8 j .. 8 j + 7 lowest first.
std::vector<std::uint8_t> NaivePack(const std::vector<Elem>& v) {
  std::vector<std::uint8_t> out((v.size() * 31 + 7) / 8, 0);
  for (std::size_t i = 0; i < v.size(); ++i) {
    for (unsigned k = 0; k < 31; ++k) {
      if ((v[i] >> k) & 1u) {
        const std::size_t bit = i * 31 + k;
        out[bit / 8] = static_cast<std::uint8_t>(out[bit / 8] | (1u << (bit % 8)));
      }
    }
  }
  return out;
}

std::vector<Elem> RandomElems(std::mt19937_64& g, std::size_t n) {
  std::vector<Elem> v(n);
  for (auto& e : v) {
    switch (g() % 4) {
      case 0:
        e = 0;
        break;
      case 1:
        e = kPrime - 1;
        break;  // the largest element: every bit but the lowest
      default:
        e = static_cast<Elem>(g() % kPrime);
    }
  }
  return v;
}

TEST(ElemPackingTest, SizesAreThirtyOneBitsRoundedUpToBytes) {
  EXPECT_EQ(PackedElemBytes(0), 0u);
  EXPECT_EQ(PackedElemBytes(1), 4u);
  EXPECT_EQ(PackedElemBytes(2), 8u);
  EXPECT_EQ(PackedElemBytes(8), 31u);
  EXPECT_EQ(PackedElemBytes(9), 35u);
  EXPECT_EQ(PackedElemBytes(std::size_t{1} << 28), (std::size_t{31} << 28) / 8);
}

TEST(ElemPackingTest, MatchesTheBitByBitReferenceAndRoundTrips) {
  const std::uint64_t seed = s3oram::testing::TestSeed();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 g(seed);
  for (std::size_t n = 0; n < 70; ++n) {
    for (int rep = 0; rep < 20; ++rep) {
      const std::vector<Elem> v = RandomElems(g, n);
      std::vector<std::uint8_t> packed(PackedElemBytes(n) + 1, 0xAB);  // sentinel after the end
      ASSERT_TRUE(PackElems(v, packed.data()));
      EXPECT_EQ(packed.back(), 0xAB) << "wrote past the end, n=" << n;
      packed.pop_back();
      ASSERT_EQ(packed, NaivePack(v)) << "n=" << n;
      std::vector<Elem> back(n, 12345);
      std::string why;
      ASSERT_TRUE(UnpackElems(packed, back, &why)) << why;
      ASSERT_EQ(back, v) << "n=" << n;
    }
  }
}

TEST(ElemPackingTest, LargeVectorRoundTrips) {
  const std::uint64_t seed = s3oram::testing::TestSeed();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 g(seed);
  const std::vector<Elem> v = RandomElems(g, 65537);
  std::vector<std::uint8_t> packed(PackedElemBytes(v.size()));
  ASSERT_TRUE(PackElems(v, packed.data()));
  EXPECT_EQ(packed, NaivePack(v));
  std::vector<Elem> back(v.size());
  ASSERT_TRUE(UnpackElems(packed, back, nullptr));
  EXPECT_EQ(back, v);
}

TEST(ElemPackingTest, PackRefusesValuesOfThirtyTwoBits) {
  const std::vector<Elem> v = {1, 0x80000000u, 2};
  std::vector<std::uint8_t> packed(PackedElemBytes(v.size()));
  EXPECT_FALSE(PackElems(v, packed.data()));
}

TEST(ElemPackingTest, UnpackRefusesThePrimeItselfAndNamesTheElement) {
  // p = 2^31 - 1 is the one 31-bit pattern that is not a canonical element.
  for (std::size_t bad = 0; bad < 9; ++bad) {
    std::vector<Elem> v(9, 7);
    std::vector<std::uint8_t> packed = NaivePack(v);
    for (unsigned k = 0; k < 31; ++k) {
      const std::size_t bit = bad * 31 + k;
      packed[bit / 8] = static_cast<std::uint8_t>(packed[bit / 8] | (1u << (bit % 8)));
    }
    std::vector<Elem> back(9);
    std::string why;
    ASSERT_FALSE(UnpackElems(packed, back, &why)) << "bad=" << bad;
    EXPECT_NE(why.find("element " + std::to_string(bad) + " "), std::string::npos) << why;
    EXPECT_NE(why.find("prime"), std::string::npos) << why;
  }
}

// The word-at-a-time paths cover whole groups of eight elements before the
// last group: a bad element anywhere in them must be caught and named as in
// the per-bit loop.
TEST(ElemPackingTest, FastPathsRefuseBadElementsAnywhere) {
  const std::uint64_t seed = s3oram::testing::TestSeed();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 g(seed);
  for (int rep = 0; rep < 200; ++rep) {
    const std::size_t n = 17 + g() % 400;
    const std::size_t bad = g() % n;
    std::vector<Elem> v = RandomElems(g, n);
    std::vector<std::uint8_t> packed(PackedElemBytes(n));
    v[bad] = 0x80000000u | static_cast<Elem>(g() % kPrime);
    EXPECT_FALSE(PackElems(v, packed.data())) << "n=" << n << " bad=" << bad;
    v[bad] = kPrime;  // packs (31 bits) but is not canonical
    ASSERT_TRUE(PackElems(v, packed.data()));
    ASSERT_EQ(packed, NaivePack(v));
    std::vector<Elem> back(n);
    std::string why;
    ASSERT_FALSE(UnpackElems(packed, back, &why)) << "n=" << n << " bad=" << bad;
    EXPECT_NE(why.find("element " + std::to_string(bad) + " "), std::string::npos) << why;
  }
}

TEST(ElemPackingTest, UnpackRefusesPaddingBitsAndWrongSizes) {
  for (std::size_t n = 1; n < 9; ++n) {
    std::vector<Elem> v(n, 5);
    std::vector<std::uint8_t> packed = NaivePack(v);
    const std::size_t pad = packed.size() * 8 - n * 31;
    std::vector<Elem> back(n);
    std::string why;
    for (std::size_t k = 0; k < pad; ++k) {
      std::vector<std::uint8_t> bad = packed;
      const std::size_t bit = n * 31 + k;
      bad[bit / 8] = static_cast<std::uint8_t>(bad[bit / 8] | (1u << (bit % 8)));
      EXPECT_FALSE(UnpackElems(bad, back, &why)) << "n=" << n << " padding bit " << k;
      EXPECT_NE(why.find("padding"), std::string::npos) << why;
    }
    std::vector<std::uint8_t> longer = packed;
    longer.push_back(0);
    EXPECT_FALSE(UnpackElems(longer, back, &why));
    std::vector<std::uint8_t> shorter(packed.begin(), packed.end() - 1);
    EXPECT_FALSE(UnpackElems(shorter, back, &why));
    EXPECT_TRUE(UnpackElems(packed, back, &why)) << why;
  }
}

}  // namespace
}  // namespace s3oram::wire

#include "oramcore/math/field.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/support/test_seed.h"

namespace s3oram::field {
namespace {

__extension__ using U128 = unsigned __int128;

constexpr std::uint64_t kP = kPrime;

// Independent reference: exact remainder through 128-bit arithmetic.
Elem RefMod(U128 x) { return static_cast<Elem>(x % kP); }
Elem RefMul(Elem a, Elem b) { return RefMod(static_cast<U128>(a) * b); }

const std::vector<std::uint64_t>& EdgeWords() {
  static const std::vector<std::uint64_t> words = {
      0,
      1,
      2,
      kP - 2,
      kP - 1,
      kP,
      kP + 1,
      std::uint64_t{1} << 30,
      (std::uint64_t{1} << 30) - 1,
      std::uint64_t{1} << 31,
      (std::uint64_t{1} << 31) + 1,
      std::uint64_t{1} << 32,
      2 * kP,
      2 * kP - 1,
      (kP - 1) * (kP - 1),
      kP * kP,
      std::uint64_t{1} << 62,
      (std::uint64_t{1} << 62) - 1,
      std::uint64_t{1} << 63,
      (std::uint64_t{1} << 63) - 1,
      ~std::uint64_t{0} - kP,
      ~std::uint64_t{0} - 1,
      ~std::uint64_t{0},
  };
  return words;
}

std::vector<Elem> EdgeElems() {
  std::vector<Elem> elems;
  for (std::uint64_t w : EdgeWords()) {
    if (w < kP) elems.push_back(static_cast<Elem>(w));
  }
  return elems;
}

Elem RandomElem(std::mt19937_64& rng) {
  return std::uniform_int_distribution<Elem>(0, kPrime - 1)(rng);
}

TEST(FieldTest, ConstantsAreConsistent) {
  static_assert(kPrime == (1u << kBits) - 1);
  static_assert(kPackBytes * 8 == kPackElems * kPackBits);
  static_assert((Elem{1} << kPackBits) < kPrime);
  static_assert(Mul(2, Inv(2)) == 1);  // Inv is usable in constant expressions
  EXPECT_EQ(ElemsForBytes(0), 0u);
  EXPECT_EQ(ElemsForBytes(1), 4u);
  EXPECT_EQ(ElemsForBytes(15), 4u);
  EXPECT_EQ(ElemsForBytes(16), 8u);
  EXPECT_EQ(ElemsForBytes(4096), 1096u);
  EXPECT_EQ(BytesForElems(3), 0u);
  EXPECT_EQ(BytesForElems(4), 15u);
  EXPECT_EQ(BytesForElems(1096), 4110u);
  for (std::size_t bytes = 0; bytes < 500; ++bytes) {
    EXPECT_GE(BytesForElems(ElemsForBytes(bytes)), bytes);
    EXPECT_LT(BytesForElems(ElemsForBytes(bytes)), bytes + kPackBytes);
  }
}

TEST(FieldTest, ReduceMatchesReferenceOnEdgeValues) {
  for (std::uint64_t x : EdgeWords()) {
    EXPECT_EQ(Reduce(x), RefMod(x)) << "x = " << x;
    EXPECT_LT(Reduce(x), kPrime);
  }
  // Neighbourhoods of every multiple of p that is a boundary of a fold step.
  for (std::uint64_t k : {1ull, 2ull, 3ull, 4ull, (1ull << 31) + 1, (1ull << 33) - 1}) {
    for (std::int64_t d = -3; d <= 3; ++d) {
      const std::uint64_t x = k * kP + static_cast<std::uint64_t>(d);
      EXPECT_EQ(Reduce(x), RefMod(x)) << "x = " << x;
    }
  }
}

TEST(FieldTest, ReduceMatchesReferenceOnRandomValues) {
  auto rng = testing::SeededRng();
  for (int i = 0; i < 200000; ++i) {
    const std::uint64_t x = rng() >> (rng() % 64);  // all magnitudes
    ASSERT_EQ(Reduce(x), RefMod(x)) << "x = " << x;
  }
}

TEST(FieldTest, OperationsMatchReferenceOnEdgePairs) {
  const std::vector<Elem> edges = EdgeElems();
  for (Elem a : edges) {
    EXPECT_EQ(Neg(a), RefMod(kP - a));
    for (Elem b : edges) {
      EXPECT_EQ(Add(a, b), RefMod(U128{a} + b)) << a << " + " << b;
      EXPECT_EQ(Sub(a, b), RefMod(U128{a} + kP - b)) << a << " - " << b;
      EXPECT_EQ(Mul(a, b), RefMul(a, b)) << a << " * " << b;
    }
  }
}

TEST(FieldTest, OperationsMatchReferenceOnRandomPairs) {
  auto rng = testing::SeededRng();
  for (int i = 0; i < 100000; ++i) {
    const Elem a = RandomElem(rng);
    const Elem b = RandomElem(rng);
    ASSERT_EQ(Add(a, b), RefMod(U128{a} + b));
    ASSERT_EQ(Sub(a, b), RefMod(U128{a} + kP - b));
    ASSERT_EQ(Mul(a, b), RefMul(a, b));
    ASSERT_EQ(Neg(a), RefMod(kP - a));
  }
}

TEST(FieldTest, FieldAxiomsHold) {
  auto rng = testing::SeededRng();
  std::vector<Elem> values = EdgeElems();
  for (int i = 0; i < 40; ++i) values.push_back(RandomElem(rng));
  for (Elem a : values) {
    EXPECT_EQ(Add(a, 0), a);
    EXPECT_EQ(Mul(a, 1), a);
    EXPECT_EQ(Mul(a, 0), 0u);
    EXPECT_EQ(Add(a, Neg(a)), 0u);
    EXPECT_EQ(Sub(a, a), 0u);
    for (Elem b : values) {
      EXPECT_EQ(Add(a, b), Add(b, a));
      EXPECT_EQ(Mul(a, b), Mul(b, a));
      EXPECT_EQ(Sub(a, b), Add(a, Neg(b)));
      EXPECT_EQ(Add(Sub(a, b), b), a);
      const Elem c = RandomElem(rng);
      EXPECT_EQ(Add(Add(a, b), c), Add(a, Add(b, c)));
      EXPECT_EQ(Mul(Mul(a, b), c), Mul(a, Mul(b, c)));
      EXPECT_EQ(Mul(a, Add(b, c)), Add(Mul(a, b), Mul(a, c)));
    }
  }
}

TEST(FieldTest, InverseAndPow) {
  auto rng = testing::SeededRng();
  std::vector<Elem> values = EdgeElems();
  for (int i = 0; i < 2000; ++i) values.push_back(RandomElem(rng));
  for (Elem a : values) {
    EXPECT_EQ(Pow(a, 0), 1u);
    EXPECT_EQ(Pow(a, 1), a);
    EXPECT_EQ(Pow(a, 2), Mul(a, a));
    if (a == 0) continue;
    EXPECT_EQ(Mul(a, Inv(a)), 1u) << "a = " << a;
    EXPECT_EQ(Pow(a, kP - 1), 1u) << "a = " << a;  // Fermat
    EXPECT_LT(Inv(a), kPrime);
  }
  EXPECT_EQ(Inv(1), 1u);
  EXPECT_EQ(Inv(kPrime - 1), kPrime - 1);
  EXPECT_EQ(Inv(2), (kPrime + 1) / 2);
  // Exponents beyond 32 bits.
  EXPECT_EQ(Pow(3, (kP - 1) * 5 + 2), 9u);
}

std::vector<std::uint8_t> RandomBytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::uint8_t> bytes(n);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
  return bytes;
}

void ExpectRoundTrip(const std::vector<std::uint8_t>& bytes) {
  const std::size_t n = bytes.size();
  const std::size_t needed = ElemsForBytes(n);
  // Room for a few extra elements, pre-filled with garbage: Pack must zero them.
  std::vector<Elem> elems(needed + 5, 0xdeadbeef);
  Pack(bytes, elems);
  for (std::size_t i = 0; i < elems.size(); ++i) {
    ASSERT_LT(elems[i], Elem{1} << kPackBits) << "n = " << n << ", element " << i;
    if (i >= needed) {
      ASSERT_EQ(elems[i], 0u) << "n = " << n << ", element " << i;
    }
  }
  std::vector<std::uint8_t> back(n, 0xa5);
  ASSERT_TRUE(Unpack(elems, back)) << "n = " << n;
  ASSERT_EQ(back, bytes) << "n = " << n;
  // Exactly-sized input decodes the same.
  std::fill(back.begin(), back.end(), 0x5a);
  ASSERT_TRUE(Unpack(std::span<const Elem>(elems).first(needed), back)) << "n = " << n;
  ASSERT_EQ(back, bytes) << "n = " << n;
}

TEST(FieldTest, PackRoundTripsEveryShortLength) {
  auto rng = testing::SeededRng();
  for (std::size_t n = 0; n <= 100; ++n) {
    ExpectRoundTrip(RandomBytes(rng, n));
    ExpectRoundTrip(std::vector<std::uint8_t>(n, 0xff));
    ExpectRoundTrip(std::vector<std::uint8_t>(n, 0x00));
  }
}

TEST(FieldTest, PackRoundTripsLargeLengths) {
  auto rng = testing::SeededRng();
  for (std::size_t n : {4095u, 4096u, 4097u, 65536u}) ExpectRoundTrip(RandomBytes(rng, n));
  for (int i = 0; i < 10; ++i) {
    ExpectRoundTrip(RandomBytes(rng, std::uniform_int_distribution<std::size_t>(101, 200000)(rng)));
  }
}

// Bit n of the little-endian 120-bit group lands in bit n % 30 of element n / 30.
TEST(FieldTest, PackUsesLittleEndianBitOrder) {
  for (unsigned bit = 0; bit < kPackBytes * 8; ++bit) {
    std::array<std::uint8_t, kPackBytes> bytes{};
    bytes[bit / 8] = static_cast<std::uint8_t>(1u << (bit % 8));
    std::array<Elem, kPackElems> elems{};
    Pack(bytes, elems);
    for (unsigned e = 0; e < kPackElems; ++e) {
      const Elem expected = e == bit / kPackBits ? Elem{1} << (bit % kPackBits) : 0;
      EXPECT_EQ(elems[e], expected) << "bit " << bit << ", element " << e;
    }
  }
  // A short group is zero-padded at the top.
  const std::array<std::uint8_t, 4> four = {0x11, 0x22, 0x33, 0xc4};
  std::array<Elem, kPackElems> elems{};
  Pack(four, elems);
  EXPECT_EQ(elems[0], 0x04332211u);
  EXPECT_EQ(elems[1], 0x3u);
  EXPECT_EQ(elems[2], 0u);
  EXPECT_EQ(elems[3], 0u);
}

TEST(FieldTest, UnpackRejectsOutOfRangeElements) {
  auto rng = testing::SeededRng();
  const std::vector<std::uint8_t> bytes = RandomBytes(rng, 64);
  std::vector<Elem> elems(ElemsForBytes(bytes.size()) + 4);
  Pack(bytes, elems);
  std::vector<std::uint8_t> out(bytes.size());
  for (Elem bad : {Elem{1} << kPackBits, (Elem{1} << kPackBits) + 1, kPrime - 1, kPrime,
                   ~Elem{0}}) {
    for (std::size_t pos = 0; pos < elems.size(); ++pos) {
      std::vector<Elem> corrupted = elems;
      corrupted[pos] = bad;
      EXPECT_FALSE(Unpack(corrupted, out)) << "bad " << bad << " at " << pos;
    }
  }
  EXPECT_TRUE(Unpack(elems, out));
  EXPECT_EQ(out, bytes);
  // Largest valid element is accepted.
  std::vector<Elem> top(kPackElems, (Elem{1} << kPackBits) - 1);
  std::vector<std::uint8_t> top_bytes(kPackBytes);
  EXPECT_TRUE(Unpack(top, top_bytes));
  EXPECT_EQ(top_bytes, std::vector<std::uint8_t>(kPackBytes, 0xff));
}

// Pack/Unpack is a bijection: changing any element of a packing by any
// amount either fails Unpack or changes the bytes. (Padding bits of a short
// final group and elements past the packing must stay zero.)
TEST(FieldTest, EveryChangeToAPackingIsVisible) {
  auto rng = testing::SeededRng();
  for (std::size_t n : {1u, 14u, 15u, 16u, 29u, 64u, 4136u}) {
    const std::vector<std::uint8_t> bytes = RandomBytes(rng, n);
    std::vector<Elem> elems(ElemsForBytes(n) + 2);
    Pack(bytes, elems);
    for (std::size_t pos = 0; pos < elems.size(); ++pos) {
      for (int trial = 0; trial < 40; ++trial) {
        std::vector<Elem> changed = elems;
        // Single bit flips (all 30 low bits), then random in-range deltas.
        const Elem delta = trial < 30 ? Elem{1} << trial
                                      : static_cast<Elem>(1 + rng() % ((Elem{1} << kPackBits) - 1));
        changed[pos] = (changed[pos] ^ delta) & ((Elem{1} << kPackBits) - 1);
        if (changed[pos] == elems[pos]) continue;
        std::vector<std::uint8_t> out(n);
        const bool ok = Unpack(changed, out);
        EXPECT_TRUE(!ok || out != bytes) << "n " << n << " element " << pos << " delta " << delta;
      }
    }
  }
}

TEST(FieldTest, UnpackRejectsTooFewElements) {
  std::vector<Elem> elems(ElemsForBytes(30) - 1, 0);
  std::vector<std::uint8_t> out(30, 0xff);
  EXPECT_FALSE(Unpack(elems, out));
  EXPECT_EQ(out, std::vector<std::uint8_t>(30, 0));
  EXPECT_TRUE(Unpack({}, std::span<std::uint8_t>{}));
}

TEST(FieldTest, AllCanonical) {
  EXPECT_TRUE(AllCanonical({}));
  std::vector<Elem> v(1000);
  auto rng = testing::SeededRng();
  for (auto& e : v) e = RandomElem(rng);
  v[17] = kPrime - 1;
  EXPECT_TRUE(AllCanonical(v));
  for (Elem bad : {kPrime, kPrime + 1, ~Elem{0}}) {
    for (std::size_t pos : {std::size_t{0}, std::size_t{511}, v.size() - 1}) {
      std::vector<Elem> w = v;
      w[pos] = bad;
      EXPECT_FALSE(AllCanonical(w)) << "bad " << bad << " at " << pos;
    }
  }
}

}  // namespace
}  // namespace s3oram::field

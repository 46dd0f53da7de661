#include "oramcore/math/slot_digest.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "tests/support/test_seed.h"

namespace s3oram::digest {
namespace {

using field::kPrime;

Seed SeedFrom(std::mt19937_64& rng) {
  Seed s{};
  for (auto& b : s) b = static_cast<std::uint8_t>(rng());
  return s;
}

std::vector<Elem> RandomElems(std::mt19937_64& rng, std::size_t n) {
  std::uniform_int_distribution<Elem> any(0, kPrime - 1);
  std::vector<Elem> v(n);
  for (auto& e : v) e = any(rng);
  return v;
}

TEST(SlotDigestTest, FastMatchesNaiveOnRandomAndExtremeSlots) {
  auto rng = testing::SeededRng();
  for (std::size_t m : {1u, 3u, 4u, 5u, 7u, 8u, 9u, 15u, 16u, 33u, 63u, 64u, 1000u, 4097u, 17411u}) {
    DigestKey key(SeedFrom(rng), m);
    for (int round = 0; round < 20; ++round) {
      std::vector<Elem> slot = RandomElems(rng, m);
      if (round == 1) slot.assign(m, kPrime - 1);  // the largest products
      if (round == 2) slot.assign(m, 0);
      SlotDigest fast{}, naive{};
      ASSERT_TRUE(key.Digest(slot, &fast));
      ASSERT_TRUE(key.DigestNaive(slot, &naive));
      EXPECT_EQ(fast, naive) << "m=" << m << " round " << round;
      if (round == 2) {
        EXPECT_EQ(fast, (SlotDigest{0, 0})) << "zeros (a sparse hole) digest to zero";
      }
    }
  }
}

TEST(SlotDigestTest, NonCanonicalElementsFail) {
  auto rng = testing::SeededRng();
  const std::size_t m = 37;
  DigestKey key(SeedFrom(rng), m);
  for (Elem bad : {kPrime, Elem{0x80000000u}, Elem{0xfffffffeu}, Elem{0xffffffffu}}) {
    for (std::size_t at : {std::size_t{0}, std::size_t{17}, m - 1}) {
      std::vector<Elem> slot = RandomElems(rng, m);
      slot[at] = bad;
      SlotDigest d{7, 7};
      EXPECT_FALSE(key.Digest(slot, &d)) << bad << " at " << at;
      EXPECT_EQ(d, (SlotDigest{7, 7})) << "out untouched on failure";
      EXPECT_FALSE(key.DigestNaive(slot, &d));
    }
  }
}

TEST(SlotDigestTest, AnyChangeOfOneSlotChangesItsDigest) {
  auto rng = testing::SeededRng();
  const std::size_t m = 512;
  DigestKey key(SeedFrom(rng), m);
  std::vector<Elem> slot = RandomElems(rng, m);
  SlotDigest before{};
  ASSERT_TRUE(key.Digest(slot, &before));
  // Every single-bit flip that keeps the element canonical changes the digest
  // (each weight is a non-zero multiple with overwhelming probability; a zero
  // weight would show here as a miss).
  int flips = 0;
  for (std::size_t c = 0; c < m; c += 7) {
    for (unsigned bit = 0; bit < 31; bit += 5) {
      std::vector<Elem> damaged = slot;
      damaged[c] ^= Elem{1} << bit;
      SlotDigest after{};
      if (!key.Digest(damaged, &after)) continue;  // became non-canonical: caught anyway
      EXPECT_NE(after, before) << "element " << c << " bit " << bit;
      ++flips;
    }
  }
  EXPECT_GT(flips, 400);
}

TEST(SlotDigestTest, LinearSoAnAnswerIsCheckedAgainstStoredDigests) {
  auto rng = testing::SeededRng();
  const std::size_t m = 300, slots = 24;
  DigestKey key(SeedFrom(rng), m);
  std::vector<Elem> bucket = RandomElems(rng, slots * m);
  std::vector<SlotDigest> digests(slots);
  ASSERT_EQ(key.DigestBucket(bucket, digests), slots);
  const std::vector<Elem> coefs = RandomElems(rng, slots);
  std::vector<Elem> answer(m, 0);
  for (std::size_t q = 0; q < slots; ++q) {
    for (std::size_t c = 0; c < m; ++c) {
      answer[c] = field::Add(answer[c], field::Mul(coefs[q], bucket[q * m + c]));
    }
  }
  SlotDigest of_answer{};
  ASSERT_TRUE(key.Digest(answer, &of_answer));
  EXPECT_EQ(of_answer, Combine(coefs, digests));
  // One damaged slot with a non-zero coefficient shows in the combination.
  bucket[5 * m + 9] = field::Add(bucket[5 * m + 9], 1);
  answer.assign(m, 0);
  for (std::size_t q = 0; q < slots; ++q) {
    for (std::size_t c = 0; c < m; ++c) {
      answer[c] = field::Add(answer[c], field::Mul(coefs[q], bucket[q * m + c]));
    }
  }
  ASSERT_TRUE(key.Digest(answer, &of_answer));
  if (coefs[5] != 0) {
    EXPECT_NE(of_answer, Combine(coefs, digests));
  }
}

TEST(SlotDigestTest, DigestBucketNamesTheFirstNonCanonicalSlot) {
  auto rng = testing::SeededRng();
  const std::size_t m = 16, slots = 6;
  DigestKey key(SeedFrom(rng), m);
  std::vector<Elem> bucket = RandomElems(rng, slots * m);
  bucket[3 * m + 2] = 0xffffffffu;
  bucket[4 * m] = kPrime;
  std::vector<SlotDigest> digests(slots);
  EXPECT_EQ(key.DigestBucket(bucket, digests), 3u);
}

// The digests on a server's disk are only as stable as the key expansion: the
// same seed must give the same key in every build and libsodium version
// (randombytes_buf_deterministic: ChaCha20, key = seed, nonce "LibsodiumDRG").
constexpr Elem kKnownDigest0 = 474360256;
constexpr Elem kKnownDigest1 = 597445351;  // both checked against ChaCha20 (RFC 8439) in Python
TEST(SlotDigestTest, KnownAnswer) {
  Seed seed{};
  for (std::size_t i = 0; i < seed.size(); ++i) seed[i] = static_cast<std::uint8_t>(i);
  DigestKey key(seed, 5);
  const std::vector<Elem> slot = {1, 2, 3, kPrime - 1, 123456789};
  SlotDigest d{};
  ASSERT_TRUE(key.Digest(slot, &d));
  EXPECT_EQ(d, (SlotDigest{kKnownDigest0, kKnownDigest1}));
}

}  // namespace
}  // namespace s3oram::digest

#include "oramcore/math/share_mac.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "oramcore/math/field.h"
#include "tests/support/test_seed.h"

namespace s3oram::share_mac {
namespace {

using field::kPrime;
using Secret32 = std::array<std::uint8_t, kKeyBytes>;

Secret32 SecretFrom(std::mt19937_64& rng) {
  Secret32 s{};
  for (auto& b : s) b = static_cast<std::uint8_t>(rng());
  return s;
}

std::vector<Elem> RandomTagged(std::mt19937_64& rng, const ShareMacKey& key) {
  std::uniform_int_distribution<Elem> any(0, kPrime - 1);
  std::vector<Elem> v(key.slot_elems());
  for (std::size_t c = 0; c < key.data_elems(); ++c) v[c] = any(rng);
  key.Tag(v);
  return v;
}

TEST(ShareMacTest, FastMatchesNaive) {
  auto rng = testing::SeededRng();
  for (std::size_t d : {1u, 3u, 4u, 5u, 63u, 1104u, 4097u}) {
    ShareMacKey key(SecretFrom(rng), d);
    ASSERT_EQ(key.slot_elems(), d + kShareMacElems);
    for (int round = 0; round < 10; ++round) {
      std::vector<Elem> fast = RandomTagged(rng, key);
      if (round == 1) {
        std::fill(fast.begin(), fast.begin() + static_cast<std::ptrdiff_t>(d), kPrime - 1);
        key.Tag(fast);
      }
      std::vector<Elem> naive = fast;
      key.TagNaive(naive);
      EXPECT_EQ(fast, naive) << "d=" << d << " round " << round;
      EXPECT_TRUE(key.Verify(fast));
    }
  }
}

TEST(ShareMacTest, ZeroSlotIsTaggedAndCombinationsOfTaggedSlotsVerify) {
  // The invariant the eviction check rests on: holes, dummies and every
  // linear combination of slots the client wrote carry valid tags.
  auto rng = testing::SeededRng();
  const std::size_t d = 276;
  ShareMacKey key(SecretFrom(rng), d);
  EXPECT_TRUE(key.Verify(std::vector<Elem>(key.slot_elems(), 0)));
  std::uniform_int_distribution<Elem> any(0, kPrime - 1);
  std::vector<Elem> sum(key.slot_elems(), 0);
  for (int q = 0; q < 50; ++q) {
    const std::vector<Elem> slot = RandomTagged(rng, key);
    const Elem c = any(rng);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = field::Add(sum[i], field::Mul(c, slot[i]));
  }
  EXPECT_TRUE(key.Verify(sum));
}

TEST(ShareMacTest, AnyChangeToDataOrTagFails) {
  auto rng = testing::SeededRng();
  const std::size_t d = 100;
  ShareMacKey key(SecretFrom(rng), d);
  std::uniform_int_distribution<Elem> nonzero(1, kPrime - 1);
  for (std::size_t at = 0; at < key.slot_elems(); ++at) {
    std::vector<Elem> slot = RandomTagged(rng, key);
    slot[at] = field::Add(slot[at], nonzero(rng));
    EXPECT_FALSE(key.Verify(slot)) << "element " << at << " changed";
  }
  std::vector<Elem> slot = RandomTagged(rng, key);
  slot[3] = kPrime;  // not canonical
  EXPECT_FALSE(key.Verify(slot));
  EXPECT_FALSE(key.Verify(std::vector<Elem>(key.slot_elems() - 1, 0))) << "wrong length";
}

TEST(ShareMacTest, TagsDependOnTheSecret) {
  auto rng = testing::SeededRng();
  const std::size_t d = 64;
  ShareMacKey a(SecretFrom(rng), d), b(SecretFrom(rng), d);
  const std::vector<Elem> slot = RandomTagged(rng, a);
  EXPECT_FALSE(b.Verify(slot)) << "a slot tagged under one key verifies under another";
}

// Two equal half secrets are the one-secret key: every slot tagged before
// halves existed still verifies.
TEST(ShareMacTest, EqualHalfSecretsAreTheOneSecretKey) {
  auto rng = testing::SeededRng();
  for (std::size_t d : {1u, 5u, 276u}) {
    const Secret32 secret = SecretFrom(rng);
    ShareMacKey one(secret, d), two(secret, secret, d);
    std::vector<Elem> a = RandomTagged(rng, one);
    std::vector<Elem> b = a;
    two.Tag(b);
    EXPECT_EQ(a, b) << "d=" << d;
  }
}

// A rotation replaces one half: a combination of slots tagged under the key
// before and the key after verifies under neither whole key, under the
// shared half of both, and a changed value fails that half.
TEST(ShareMacTest, TheSharedHalfVerifiesCombinationsOfBothKeysOfARotation) {
  auto rng = testing::SeededRng();
  const std::size_t d = 97;
  const Secret32 kept = SecretFrom(rng), old_half = SecretFrom(rng), new_half = SecretFrom(rng);
  for (std::size_t replaced = 0; replaced < kHalves; ++replaced) {
    SCOPED_TRACE(replaced);
    const std::size_t shared = 1 - replaced;
    ShareMacKey before(replaced == 0 ? old_half : kept, replaced == 1 ? old_half : kept, d);
    ShareMacKey after(replaced == 0 ? new_half : kept, replaced == 1 ? new_half : kept, d);
    const std::vector<Elem> x = RandomTagged(rng, before);
    const std::vector<Elem> y = RandomTagged(rng, after);
    EXPECT_TRUE(before.VerifyHalf(x, shared) && after.VerifyHalf(x, shared));
    EXPECT_TRUE(before.VerifyHalf(y, shared) && after.VerifyHalf(y, shared));
    EXPECT_FALSE(after.VerifyHalf(x, replaced)) << "the replaced half verifies the old tags";
    std::uniform_int_distribution<Elem> any(1, kPrime - 1);
    const Elem a = any(rng), b = any(rng);
    std::vector<Elem> mix(x.size());
    for (std::size_t c = 0; c < mix.size(); ++c) {
      mix[c] = field::Add(field::Mul(a, x[c]), field::Mul(b, y[c]));
    }
    EXPECT_FALSE(before.Verify(mix));
    EXPECT_FALSE(after.Verify(mix));
    EXPECT_TRUE(after.VerifyHalf(mix, shared));
    EXPECT_TRUE(before.VerifyHalf(mix, shared));
    // An error in the data, whatever the other half's tags say.
    std::vector<Elem> wrong = mix;
    const std::size_t at = std::uniform_int_distribution<std::size_t>(0, d - 1)(rng);
    wrong[at] = field::Add(wrong[at], any(rng));
    EXPECT_FALSE(after.VerifyHalf(wrong, shared));
    // An error in the half's own tags.
    std::vector<Elem> bad_tag = mix;
    bad_tag[d + shared * kElemsPerHalf] = field::Add(bad_tag[d + shared * kElemsPerHalf], 1);
    EXPECT_FALSE(after.VerifyHalf(bad_tag, shared));
    // Non-canonical elements and the wrong length are refused.
    std::vector<Elem> big = mix;
    big[0] = kPrime;
    EXPECT_FALSE(after.VerifyHalf(big, shared));
    EXPECT_FALSE(after.VerifyHalf(std::vector<Elem>(mix.size() - 1, 0), shared));
  }
}

TEST(ShareMacTest, KnownAnswer) {
  // The tags stored on the servers depend on this expansion: it must never
  // change (libsodium documents randombytes_buf_deterministic as stable).
  Secret32 secret{};
  for (std::size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<std::uint8_t>(i);
  ShareMacKey key(secret, 3);
  std::vector<Elem> slot{1, 0, 0, 0, 0, 0, 0};  // e_0: its tags are the key's first column
  key.Tag(slot);
  const std::vector<Elem> want{1, 0, 0, 1181519373, 1330655911, 596318852, 778582642};
  EXPECT_EQ(slot, want);
}

}  // namespace
}  // namespace s3oram::share_mac

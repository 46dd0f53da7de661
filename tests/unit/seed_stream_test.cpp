// ElemsFromSeed (oramcore/math/seed_stream.h) against the keystream read
// word by word: the same elements for the same seed and nonce, others for
// another seed or nonce, every element below p.
#include "oramcore/math/seed_stream.h"

#include <gtest/gtest.h>
#include <sodium.h>

#include <array>
#include <vector>

#include "oramcore/base/random.h"

namespace s3oram {
namespace {

using Seed = std::array<std::uint8_t, kStreamSeedBytes>;
using Nonce = std::array<std::uint8_t, kStreamNonceBytes>;

Seed RandomSeed() {
  Seed s;
  random::Bytes(s);
  return s;
}

// The naive reading: keystream word w (little-endian) masked to 31 bits,
// skipped when it equals p.
std::vector<field::Elem> Naive(const Seed& seed, const Nonce& nonce, std::size_t n) {
  std::vector<std::uint8_t> ks(4 * n + 4096);
  crypto_stream_xchacha20(ks.data(), ks.size(), nonce.data(), seed.data());
  std::vector<field::Elem> out;
  for (std::size_t w = 0; out.size() < n; w += 4) {
    const field::Elem v = (field::Elem{ks[w]} | field::Elem{ks[w + 1]} << 8 |
                           field::Elem{ks[w + 2]} << 16 | field::Elem{ks[w + 3]} << 24) &
                          field::kPrime;
    if (v != field::kPrime) out.push_back(v);
  }
  return out;
}

TEST(SeedStreamTest, ElemsAreTheKeystreamsWordsAndRepeatOnlyForTheSameSeedAndNonce) {
  for (std::size_t n : {1u, 15u, 16u, 17u, 1000u, 65537u}) {
    const Seed seed = RandomSeed();
    Nonce nonce{};
    nonce[0] = static_cast<std::uint8_t>(n);
    std::vector<field::Elem> a(n), b(n);
    ElemsFromSeed(seed, nonce, a);
    ElemsFromSeed(seed, nonce, b);
    EXPECT_EQ(a, b) << n;
    EXPECT_EQ(a, Naive(seed, nonce, n)) << n;
    for (field::Elem e : a) ASSERT_LT(e, field::kPrime);
    if (n < 16) continue;  // a chance equality of short streams is not a bug
    Seed other = seed;
    other[31] ^= 1;
    std::vector<field::Elem> c(n);
    ElemsFromSeed(other, nonce, c);
    EXPECT_NE(a, c) << n;
    Nonce next = nonce;
    next[23] ^= 1;
    ElemsFromSeed(seed, next, c);
    EXPECT_NE(a, c) << n;
  }
}

}  // namespace
}  // namespace s3oram

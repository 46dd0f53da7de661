#include "oramcore/math/age_fill.h"

#include <sodium.h>

#include <algorithm>
#include <cassert>
#include <vector>

#include "oramcore/math/shamir.h"

namespace s3oram::age_fill {

using field::Elem;

namespace {

// Coefficient k's stream for one bucket: its own ChaCha20 key (BLAKE2b of
// a label, the bucket and k, keyed by the seed), so no two buckets or
// coefficients share a stream.
void ExpandCoefficients(const Seed& seed, std::uint64_t bucket, std::size_t k,
                        std::span<Elem> out) {
  static constexpr char kLabel[] = "s3oram age fill";
  unsigned char input[sizeof kLabel - 1 + 16];
  std::copy(kLabel, kLabel + sizeof kLabel - 1, input);
  for (int i = 0; i < 8; ++i) {
    input[sizeof kLabel - 1 + i] = static_cast<unsigned char>(bucket >> (8 * i));
    input[sizeof kLabel - 1 + 8 + i] = static_cast<unsigned char>(std::uint64_t{k} >> (8 * i));
  }
  std::array<unsigned char, randombytes_SEEDBYTES> key{};
  crypto_generichash(key.data(), key.size(), input, sizeof input, seed.data(), seed.size());
  randombytes_buf_deterministic(out.data(), out.size_bytes(), key.data());
  for (Elem& a : out) {
    a &= field::kPrime;
    if (a == field::kPrime) a = 0;  // 2^-31 per element; the bias is irrelevant here
  }
  sodium_memzero(key.data(), key.size());
}

}  // namespace

void BucketShares(const Seed& seed, std::uint64_t bucket, std::size_t threshold, std::size_t party,
                  std::span<Elem> out) {
  assert(threshold >= 1);
  const Elem x = shamir::PartyX(party);
  std::fill(out.begin(), out.end(), Elem{0});
  std::vector<Elem> coefficient(out.size());
  Elem x_power = 1;
  for (std::size_t k = 1; k <= threshold; ++k) {
    x_power = field::Mul(x_power, x);
    ExpandCoefficients(seed, bucket, k, coefficient);
    for (std::size_t j = 0; j < out.size(); ++j) {
      out[j] = field::Add(out[j], field::Mul(coefficient[j], x_power));
    }
  }
}

}  // namespace s3oram::age_fill

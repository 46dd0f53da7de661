#include "oramcore/math/seed_stream.h"

#include <sodium.h>

#include <vector>

namespace s3oram {

namespace {

constexpr std::size_t kBlockBytes = 64;  // one ChaCha20 block
static_assert(crypto_stream_xchacha20_KEYBYTES == kStreamSeedBytes);
static_assert(crypto_stream_xchacha20_NONCEBYTES == kStreamNonceBytes);

// A candidate element from a 4-byte keystream word: its low 31 bits; rejected
// if equal to p, the one 31-bit value that is not a field element.
inline bool Accept(const std::uint8_t* w, field::Elem* out) {
  const field::Elem v = (field::Elem{w[0]} | field::Elem{w[1]} << 8 | field::Elem{w[2]} << 16 |
                         field::Elem{w[3]} << 24) &
                        field::kPrime;
  if (v == field::kPrime) return false;
  *out = v;
  return true;
}

}  // namespace

void ElemsFromSeed(std::span<const std::uint8_t, kStreamSeedBytes> seed,
                   std::span<const std::uint8_t, kStreamNonceBytes> nonce,
                   std::span<field::Elem> out) {
  const std::size_t n = out.size();
  if (n == 0) return;
  // Keystream for n words, rounded up to whole blocks; rejections
  // (probability 2^-31 per word) are refilled from the blocks that follow.
  const std::size_t blocks = (n * 4 + kBlockBytes - 1) / kBlockBytes;
  std::vector<std::uint8_t> ks(blocks * kBlockBytes);
  crypto_stream_xchacha20(ks.data(), ks.size(), nonce.data(), seed.data());
  std::size_t filled = 0;
  for (std::size_t w = 0; w + 4 <= ks.size() && filled < n; w += 4) {
    if (Accept(ks.data() + w, &out[filled])) ++filled;
  }
  std::uint64_t next_block = blocks;
  std::array<std::uint8_t, kBlockBytes> zero{}, more{};
  while (filled < n) {
    crypto_stream_xchacha20_xor_ic(more.data(), zero.data(), more.size(), nonce.data(),
                                   next_block++, seed.data());
    for (std::size_t w = 0; w < more.size() && filled < n; w += 4) {
      if (Accept(more.data() + w, &out[filled])) ++filled;
    }
  }
  sodium_memzero(ks.data(), ks.size());
  sodium_memzero(more.data(), more.size());
}

}  // namespace s3oram

#include "serverd/rebuild_masks.h"

#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace s3oram::serverd::rebuild {

namespace {

constexpr std::string_view kLabel = "s3oram rebuild mask";
constexpr std::size_t kBlockBytes = 64;  // one ChaCha20 block
static_assert(crypto_stream_xchacha20_KEYBYTES == kSeedBytes);
static_assert(crypto_scalarmult_BYTES == kKeyBytes && crypto_scalarmult_SCALARBYTES == kKeyBytes);

std::array<std::uint8_t, crypto_stream_xchacha20_NONCEBYTES> BucketNonce(std::uint64_t bucket) {
  std::array<std::uint8_t, crypto_stream_xchacha20_NONCEBYTES> n{};
  for (std::size_t i = 0; i < 8; ++i) n[i] = static_cast<std::uint8_t>(bucket >> (8 * i));
  return n;
}

// Candidate element of a 4-byte keystream word: its low 31 bits; rejected if
// equal to p, the only 31-bit value that is not a field element.
inline bool Accept(const std::uint8_t* w, Elem* out) {
  const Elem v =
      (Elem{w[0]} | Elem{w[1]} << 8 | Elem{w[2]} << 16 | Elem{w[3]} << 24) & field::kPrime;
  if (v == field::kPrime) return false;
  *out = v;
  return true;
}

}  // namespace

Result<Secret> PairSeed(const Secret& own_secret, const PublicKey& own_public,
                        const PublicKey& peer_public, const SessionNonce& nonce) {
  if (own_secret.size() != kKeyBytes) {
    return Status::InvalidArgument("rebuild masks: secret key must be 32 bytes");
  }
  if (own_public == peer_public) {
    return Status::InvalidArgument("rebuild masks: own and peer public keys are equal");
  }
  Secret shared(crypto_scalarmult_BYTES);
  // Fails (non-zero) for a low-order peer point, whose shared secret would be
  // all zeros and so known to everybody.
  if (crypto_scalarmult(shared.data(), own_secret.data(), peer_public.data()) != 0) {
    return Status::InvalidArgument("rebuild masks: degenerate X25519 shared secret (bad peer key)");
  }
  const PublicKey& lo = std::min(own_public, peer_public);
  const PublicKey& hi = std::max(own_public, peer_public);
  Secret seed(kSeedBytes);
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, kSeedBytes);
  crypto_generichash_update(&st, shared.data(), shared.size());
  crypto_generichash_update(&st, nonce.data(), nonce.size());
  crypto_generichash_update(&st, lo.data(), lo.size());
  crypto_generichash_update(&st, hi.data(), hi.size());
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(kLabel.data()),
                            kLabel.size());
  crypto_generichash_final(&st, seed.data(), seed.size());
  sodium_memzero(&st, sizeof st);
  return seed;  // `shared` is zeroed by its destructor
}

void MaskStream(const Secret& seed, std::uint64_t bucket, std::span<Elem> out) {
  const auto nonce = BucketNonce(bucket);
  const std::size_t n = out.size();
  if (n == 0) return;
  // Keystream for n words, rounded up to whole blocks; rejections (probability
  // 2^-31 per word) are refilled from the blocks that follow.
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
  // The keystream is as secret as the seed.
  sodium_memzero(ks.data(), ks.size());
  sodium_memzero(more.data(), more.size());
}

void ApplyMasks(std::span<const PairMask> pairs, std::uint64_t bucket, std::span<Elem> inout,
                std::vector<Elem>& scratch) {
  scratch.resize(inout.size());
  for (const PairMask& pair : pairs) {
    MaskStream(pair.seed, bucket, scratch);
    if (pair.add) {
      for (std::size_t k = 0; k < inout.size(); ++k) inout[k] = field::Add(inout[k], scratch[k]);
    } else {
      for (std::size_t k = 0; k < inout.size(); ++k) inout[k] = field::Sub(inout[k], scratch[k]);
    }
  }
  sodium_memzero(scratch.data(), scratch.size() * sizeof(Elem));
}

}  // namespace s3oram::serverd::rebuild

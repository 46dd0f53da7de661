#include "serverd/rebuild_masks.h"

#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "oramcore/math/seed_stream.h"

namespace s3oram::serverd::rebuild {

namespace {

constexpr std::string_view kLabel = "s3oram rebuild mask";
static_assert(kStreamSeedBytes == kSeedBytes);
static_assert(crypto_scalarmult_BYTES == kKeyBytes && crypto_scalarmult_SCALARBYTES == kKeyBytes);

std::array<std::uint8_t, crypto_stream_xchacha20_NONCEBYTES> BucketNonce(std::uint64_t bucket) {
  std::array<std::uint8_t, crypto_stream_xchacha20_NONCEBYTES> n{};
  for (std::size_t i = 0; i < 8; ++i) n[i] = static_cast<std::uint8_t>(bucket >> (8 * i));
  return n;
}

}  // namespace

Result<Secret> PairSeed(const Secret& own_secret, const PublicKey& own_public,
                        const PublicKey& peer_public, const SessionNonce& nonce,
                        std::uint32_t target, std::span<const std::uint32_t> participants) {
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
  auto add_u32 = [&st](std::uint32_t v) {
    const std::array<std::uint8_t, 4> le = {
        static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8),
        static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 24)};
    crypto_generichash_update(&st, le.data(), le.size());
  };
  add_u32(target);
  add_u32(static_cast<std::uint32_t>(participants.size()));
  for (std::uint32_t p : participants) add_u32(p);
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(kLabel.data()),
                            kLabel.size());
  crypto_generichash_final(&st, seed.data(), seed.size());
  sodium_memzero(&st, sizeof st);
  return seed;  // `shared` is zeroed by its destructor
}

void MaskStream(const Secret& seed, std::uint64_t bucket, std::span<Elem> out) {
  const auto nonce = BucketNonce(bucket);
  ElemsFromSeed(std::span<const std::uint8_t, kStreamSeedBytes>(seed.data(), kStreamSeedBytes),
                nonce, out);
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

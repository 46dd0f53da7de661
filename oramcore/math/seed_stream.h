// Field elements drawn from a 32-byte seed: the XChaCha20 keystream under
// (seed, nonce), read as little-endian 31-bit words, p itself rejected. For a
// uniformly random secret seed the elements are indistinguishable from
// uniform ones; the same (seed, nonce) always gives the same elements, on any
// machine, so a party that is given the seed computes what the giver did.
//
// Used for the share a client sends as a seed (wire::ShareSeed: a degree-1
// sharing may have one pseudorandom share) and for the servers' rebuild
// masks (serverd/rebuild_masks.h). Pure: no state, no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "oramcore/math/field.h"

namespace s3oram {

inline constexpr std::size_t kStreamSeedBytes = 32;   // the XChaCha20 key
inline constexpr std::size_t kStreamNonceBytes = 24;  // its nonce

// Fills `out` with the elements of the stream of (seed, nonce). Its
// keystream is zeroed after use (it is as secret as the seed).
void ElemsFromSeed(std::span<const std::uint8_t, kStreamSeedBytes> seed,
                   std::span<const std::uint8_t, kStreamNonceBytes> nonce,
                   std::span<field::Elem> out);

}  // namespace s3oram

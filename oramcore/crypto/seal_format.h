// The layout of a sealed ORAM block payload (see block_seal.h):
//   nonce (24 bytes) || ciphertext (B bytes) || tag (16 bytes).
// An ORAM slot therefore carries B + kSealOverhead bytes (OramParams).
#pragma once

#include <cstddef>

namespace s3oram {

inline constexpr std::size_t kSealNonceBytes = 24;
inline constexpr std::size_t kSealTagBytes = 16;
inline constexpr std::size_t kSealOverhead = kSealNonceBytes + kSealTagBytes;

}  // namespace s3oram

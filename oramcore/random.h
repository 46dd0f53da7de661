// All randomness in s3oram comes from here, and everything here comes from the
// operating system's CSPRNG through libsodium. Requests up to 256 bytes are
// randombytes_buf output; larger ones are the ChaCha20 keystream of a fresh
// 256-bit key drawn from randombytes_buf for that request alone and zeroed
// after it (libsodium's own generator construction, without state kept between
// calls). There is no seed to set: two processes never draw the same shares.
#pragma once

#include <cstdint>
#include <span>

#include "oramcore/field.h"

namespace s3oram::random {

// Calls sodium_init() once; aborts the process if libsodium cannot initialise
// (there is no safe way to continue without a CSPRNG).
void EnsureInitialized();

void Bytes(std::span<std::uint8_t> out);
// Uniform in [0, bound); bound > 0.
std::uint64_t Below(std::uint64_t bound);
// Uniform field elements in [0, p), by rejection sampling of 31-bit words.
void Elems(std::span<field::Elem> out);

}  // namespace s3oram::random

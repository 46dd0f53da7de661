// All randomness in s3oram comes from here, and everything here comes from the
// operating system's CSPRNG through libsodium. Requests up to 256 bytes are
// randombytes_buf output; larger ones are the ChaCha20 keystream of a fresh
// 256-bit key drawn from randombytes_buf for that request alone and zeroed
// after it (libsodium's own generator construction, without state kept between
// calls). There is no seed to set: two processes never draw the same shares.
// Uniform field elements are drawn from here too, by math/random_elems.h.
#pragma once

#include <cstdint>
#include <span>

namespace s3oram::random {

// Calls sodium_init() once; aborts the process if libsodium cannot initialise
// (there is no safe way to continue without a CSPRNG).
void EnsureInitialized();

void Bytes(std::span<std::uint8_t> out);
// Uniform in [0, bound); bound > 0.
std::uint64_t Below(std::uint64_t bound);

}  // namespace s3oram::random

// All randomness in s3oram comes from here, and everything here comes from the
// operating system's CSPRNG through libsodium (randombytes_buf). There is no
// seed to set: two processes never draw the same shares.
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

// Lazy reduction for dot products of canonical field elements: a 64-bit
// accumulator takes kProductsPerFold products between two Folds, and
// field::Reduce finishes it. Shared by the slot digest and the share MAC,
// whose inner loops are the same sum of products with one fold per group.
#pragma once

#include <cstddef>
#include <cstdint>

#include "oramcore/math/field.h"

namespace s3oram::field::lazy {

inline constexpr std::uint64_t kP = kPrime;
// A folded accumulator plus four products of canonical elements stays below
// 2^64: Fold leaves < 2^31 + 2^33, and 4 (p - 1)^2 < 2^64 - 2^35.
inline constexpr std::size_t kProductsPerFold = 4;
static_assert((kP + (~std::uint64_t{0} >> 31)) <=
              ~std::uint64_t{0} - kProductsPerFold * (kP - 1) * (kP - 1));

// x mod p up to a multiple of p, small enough for kProductsPerFold more products.
inline std::uint64_t Fold(std::uint64_t x) { return (x & kP) + (x >> 31); }

}  // namespace s3oram::field::lazy

// Field elements on the wire: 31 bits each, packed.
//
// Every element of GF(2^31 - 1) fits in 31 bits, so a vector of n elements
// travels as ceil(31 n / 8) bytes instead of 4 n: element i occupies bits
// [31 i, 31 i + 31) of a little-endian bit string, and the bits after the last
// element, up to the byte boundary, are zero. Shares are uniformly random, so
// this is the only compaction that applies to them (they do not compress).
//
// Guarantees: Pack followed by Unpack is the identity on canonical elements;
// Unpack accepts exactly the byte strings Pack produces, so every vector has
// one encoding (a value of p, the one non-canonical 31-bit value, or a set
// padding bit is refused and the index reported).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "oramcore/math/field.h"

namespace s3oram::wire {

inline constexpr unsigned kElemWireBits = 31;
// Largest element vector a decoder accepts (1 GiB of elements); the tree's
// parameters are checked against it (tree/params.cpp), so it lives here,
// below both.
inline constexpr std::uint32_t kMaxElems = (1u << 28);

// Bytes of a packed vector of `count` elements.
constexpr std::size_t PackedElemBytes(std::size_t count) { return (count * kElemWireBits + 7) / 8; }

// Writes PackedElemBytes(in.size()) bytes to `out`. Every element must be
// below 2^31; returns false (having written garbage) if one is not.
bool PackElems(std::span<const field::Elem> in, std::uint8_t* out);

// Reads out.size() elements from `in`, which must be exactly
// PackedElemBytes(out.size()) bytes. On a non-canonical element or a nonzero
// padding bit returns false and says which in *error.
bool UnpackElems(std::span<const std::uint8_t> in, std::span<field::Elem> out, std::string* error);

}  // namespace s3oram::wire

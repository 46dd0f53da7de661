// The prime field F_p that every share, select vector and matrix lives in, and
// the one packing of bytes into field elements. Nothing else in s3oram may
// assume a prime or an encoding: use these names.
//
// Choice (see bench/field_bench.cpp and docs/PERFORMANCE.md): p = 2^31 - 1.
//  * Reduction of a 62-bit product is two shifts, a mask and an add.
//  * Products fit 64-bit lanes, so AVX2's 4-wide 32x32->64 multiply carries the
//    eviction matrix product, which dominates the cost of an access.
//  * Elements are stored as 32-bit little-endian words; packing puts 30 data bits
//    in each (15 bytes -> 4 elements, 93.75% density).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace s3oram::field {

using Elem = std::uint32_t;

inline constexpr Elem kPrime = 0x7fffffffu;  // 2^31 - 1
inline constexpr unsigned kBits = 31;
inline constexpr std::size_t kElemBytes = sizeof(Elem);

// Packing: every kPackBytes input bytes become kPackElems elements of
// kPackBits data bits each (all < 2^30 < p). A short final group is zero-padded.
inline constexpr std::size_t kPackBytes = 15;
inline constexpr std::size_t kPackElems = 4;
inline constexpr unsigned kPackBits = 30;

// x mod p for any x < 2^64.
constexpr Elem Reduce(std::uint64_t x) {
  x = (x & kPrime) + (x >> 31);  // < 2^31 + 2^33
  x = (x & kPrime) + (x >> 31);  // < 2^31 + 8
  return static_cast<Elem>(x >= kPrime ? x - kPrime : x);
}
constexpr Elem Add(Elem a, Elem b) {
  Elem s = a + b;  // a, b < 2^31 so no wrap
  return s >= kPrime ? s - kPrime : s;
}
constexpr Elem Sub(Elem a, Elem b) { return a >= b ? a - b : a + kPrime - b; }
constexpr Elem Neg(Elem a) { return a == 0 ? 0 : kPrime - a; }
constexpr Elem Mul(Elem a, Elem b) {
  return Reduce(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
}
constexpr Elem Pow(Elem base, std::uint64_t e) {
  Elem r = 1;
  while (e) {
    if (e & 1) r = Mul(r, base);
    base = Mul(base, base);
    e >>= 1;
  }
  return r;
}
// Multiplicative inverse; a must be non-zero.
constexpr Elem Inv(Elem a) { return Pow(a, kPrime - 2); }

// Number of elements that hold `bytes` bytes.
constexpr std::size_t ElemsForBytes(std::size_t bytes) {
  return (bytes + kPackBytes - 1) / kPackBytes * kPackElems;
}
// Largest byte count that `elems` elements can hold (elems need not be a multiple of kPackElems).
constexpr std::size_t BytesForElems(std::size_t elems) {
  return elems / kPackElems * kPackBytes;
}

// Packs `in` into exactly ElemsForBytes(in.size()) elements of `out`
// (out.size() must be at least that; extra elements are set to zero).
void Pack(std::span<const std::uint8_t> in, std::span<Elem> out);

// Inverse of Pack. Returns false (and fills `out` with what it could) unless
// `in` is exactly what Pack makes of some byte string: every element < 2^30,
// zero padding bits in a short final group, zero elements past the packing.
// So Pack/Unpack is a bijection, and any change to a packing either fails
// here or changes the bytes (which the AEAD tag then catches). Failure is the
// sign of a bad reconstruction or a lying server, never of good data.
[[nodiscard]] bool Unpack(std::span<const Elem> in, std::span<std::uint8_t> out);

// True iff every element is < p (a valid canonical field element).
bool AllCanonical(std::span<const Elem> v);

}  // namespace s3oram::field

#include "oramcore/math/elem_packing.h"

#include <algorithm>

namespace s3oram::wire {

namespace {
constexpr std::uint64_t kMask31 = (std::uint64_t{1} << 31) - 1;
}  // namespace

bool PackElems(std::span<const field::Elem> in, std::uint8_t* out) {
  // Invariant: `acc` holds `bits` (< 32) pending bits, lowest first; whole
  // 32-bit words leave as soon as they are complete.
  std::uint64_t acc = 0;
  unsigned bits = 0;
  field::Elem all = 0;
  for (field::Elem e : in) {
    all |= e;
    acc |= std::uint64_t{e} << bits;
    bits += kElemWireBits;
    if (bits >= 32) {
      const auto w = static_cast<std::uint32_t>(acc);
      out[0] = static_cast<std::uint8_t>(w);
      out[1] = static_cast<std::uint8_t>(w >> 8);
      out[2] = static_cast<std::uint8_t>(w >> 16);
      out[3] = static_cast<std::uint8_t>(w >> 24);
      out += 4;
      acc >>= 32;
      bits -= 32;
    }
  }
  for (; bits > 0; bits = bits > 8 ? bits - 8 : 0) {
    *out++ = static_cast<std::uint8_t>(acc);
    acc >>= 8;
  }
  return (all >> kElemWireBits) == 0;
}

bool UnpackElems(std::span<const std::uint8_t> in, std::span<field::Elem> out, std::string* error) {
  if (in.size() != PackedElemBytes(out.size())) {
    if (error) {
      *error = std::to_string(in.size()) + " bytes for " + std::to_string(out.size()) +
               " packed elements (want " + std::to_string(PackedElemBytes(out.size())) + ")";
    }
    return false;
  }
  // Invariant: `acc` holds `bits` unread bits, lowest first. Before each
  // element at least 31 are loaded: a full word when 4 bytes remain, else the
  // whole tail, which by the size check holds every bit still owed.
  std::uint64_t acc = 0;
  unsigned bits = 0;
  std::size_t pos = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (bits < kElemWireBits) {
      const std::size_t take = std::min<std::size_t>(4, in.size() - pos);
      std::uint64_t w = 0;
      for (std::size_t k = 0; k < take; ++k) w |= std::uint64_t{in[pos + k]} << (8 * k);
      acc |= w << bits;
      bits += static_cast<unsigned>(8 * take);
      pos += take;
    }
    const auto v = static_cast<field::Elem>(acc & kMask31);
    if (v >= field::kPrime) {
      if (error) {
        *error = "element " + std::to_string(i) + " is " + std::to_string(v) +
                 ", not below the prime " + std::to_string(field::kPrime);
      }
      return false;
    }
    out[i] = v;
    acc >>= kElemWireBits;
    bits -= kElemWireBits;
  }
  if (pos != in.size() || acc != 0) {
    if (error) *error = "nonzero padding bits after the last element";
    return false;
  }
  return true;
}

}  // namespace s3oram::wire

#include "oramcore/math/elem_packing.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace s3oram::wire {

namespace {
constexpr std::uint64_t kMask31 = (std::uint64_t{1} << 31) - 1;

// Eight elements are exactly 31 bytes, so a vector splits into byte-aligned
// groups that the fast paths below handle with whole 64-bit words; the
// per-bit loops handle what is left at the end.
constexpr std::size_t kGroupElems = 8;
constexpr std::size_t kGroupBytes = 31;

std::uint64_t LoadLe64(const std::uint8_t* p) {
  std::uint64_t w;
  std::memcpy(&w, p, sizeof w);
  if constexpr (std::endian::native == std::endian::big) w = __builtin_bswap64(w);
  return w;
}

void StoreLe64(std::uint8_t* p, std::uint64_t w) {
  if constexpr (std::endian::native == std::endian::big) w = __builtin_bswap64(w);
  std::memcpy(p, &w, sizeof w);
}
}  // namespace

bool PackElems(std::span<const field::Elem> in, std::uint8_t* out) {
  field::Elem all = 0;
  // Whole groups, each written as four little-endian words (32 bytes, the
  // last of them zero and overwritten by the next group). The last group is
  // left to the loop below so that nothing is written past the end.
  const std::size_t groups = in.size() / kGroupElems;
  const std::size_t fast_groups = groups > 0 ? groups - 1 : 0;
  const field::Elem* src = in.data();
  for (std::size_t g = 0; g < fast_groups; ++g, src += kGroupElems, out += kGroupBytes) {
    std::uint64_t v[kGroupElems];
    for (std::size_t k = 0; k < kGroupElems; ++k) {
      all |= src[k];
      v[k] = src[k];
    }
    // Element k occupies bits [31 k, 31 k + 31) of the group.
    StoreLe64(out, v[0] | v[1] << 31 | v[2] << 62);
    StoreLe64(out + 8, v[2] >> 2 | v[3] << 29 | v[4] << 60);
    StoreLe64(out + 16, v[4] >> 4 | v[5] << 27 | v[6] << 58);
    StoreLe64(out + 24, v[6] >> 6 | v[7] << 25);
  }
  in = in.subspan(fast_groups * kGroupElems);
  // Invariant: `acc` holds `bits` (< 32) pending bits, lowest first; whole
  // 32-bit words leave as soon as they are complete.
  std::uint64_t acc = 0;
  unsigned bits = 0;
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
  // Fast path: whole groups whose last 8-byte load stays inside `in`, read
  // with one unaligned word per element. A non-canonical element found here
  // sends the whole vector through the loop below, which names it.
  std::size_t first = 0;
  if (in.size() >= kGroupBytes + 8) {
    const std::size_t groups =
        std::min(out.size() / kGroupElems, (in.size() - 8 - 27) / kGroupBytes + 1);
    field::Elem bad = 0;
    const std::uint8_t* p = in.data();
    field::Elem* o = out.data();
    for (std::size_t g = 0; g < groups; ++g, p += kGroupBytes, o += kGroupElems) {
      // Element k starts at bit 31 k: byte 31 k / 8, shift 31 k % 8.
      o[0] = static_cast<field::Elem>(LoadLe64(p) & kMask31);
      o[1] = static_cast<field::Elem>((LoadLe64(p + 3) >> 7) & kMask31);
      o[2] = static_cast<field::Elem>((LoadLe64(p + 7) >> 6) & kMask31);
      o[3] = static_cast<field::Elem>((LoadLe64(p + 11) >> 5) & kMask31);
      o[4] = static_cast<field::Elem>((LoadLe64(p + 15) >> 4) & kMask31);
      o[5] = static_cast<field::Elem>((LoadLe64(p + 19) >> 3) & kMask31);
      o[6] = static_cast<field::Elem>((LoadLe64(p + 23) >> 2) & kMask31);
      o[7] = static_cast<field::Elem>((LoadLe64(p + 27) >> 1) & kMask31);
      for (std::size_t k = 0; k < kGroupElems; ++k) bad |= o[k] == field::kPrime ? 1u : 0u;
    }
    if (!bad) first = groups * kGroupElems;
  }
  // Invariant: `acc` holds `bits` unread bits, lowest first. Before each
  // element at least 31 are loaded: a full word when 4 bytes remain, else the
  // whole tail, which by the size check holds every bit still owed.
  std::uint64_t acc = 0;
  unsigned bits = 0;
  std::size_t pos = first / kGroupElems * kGroupBytes;
  for (std::size_t i = first; i < out.size(); ++i) {
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

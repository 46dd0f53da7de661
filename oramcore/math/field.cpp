#include "oramcore/math/field.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace s3oram::field {
namespace {

// A packing group is the 120-bit little-endian integer formed by kPackBytes
// bytes; element k of the group holds bits [30k, 30k + 30). The group is handled
// as two 64-bit halves: `low` = bytes 0..7, `high` = bytes 8..14 (top byte 0).
static_assert(kPackBytes * 8 == kPackElems * kPackBits);
static_assert(kPackBytes <= 16 && kPackBits < kBits);

constexpr std::uint64_t kPackMask = (std::uint64_t{1} << kPackBits) - 1;

struct Group {
  std::uint64_t low;
  std::uint64_t high;
};

std::uint64_t FromLittleEndian(std::uint64_t v) {
  if constexpr (std::endian::native == std::endian::big) return __builtin_bswap64(v);
  return v;
}

Group LoadGroup(const std::uint8_t* bytes, std::size_t count) {
  std::array<std::uint8_t, 16> buffer{};
  std::memcpy(buffer.data(), bytes, count);
  Group g;
  std::memcpy(&g.low, buffer.data(), 8);
  std::memcpy(&g.high, buffer.data() + 8, 8);
  return {FromLittleEndian(g.low), FromLittleEndian(g.high)};
}

void StoreGroup(Group g, std::uint8_t* bytes, std::size_t count) {
  std::array<std::uint8_t, 16> buffer;
  const std::uint64_t low = FromLittleEndian(g.low);
  const std::uint64_t high = FromLittleEndian(g.high);
  std::memcpy(buffer.data(), &low, 8);
  std::memcpy(buffer.data() + 8, &high, 8);
  std::memcpy(bytes, buffer.data(), count);
}

void SplitGroup(Group g, Elem* out) {
  out[0] = static_cast<Elem>(g.low & kPackMask);
  out[1] = static_cast<Elem>((g.low >> 30) & kPackMask);
  out[2] = static_cast<Elem>(((g.low >> 60) | (g.high << 4)) & kPackMask);
  out[3] = static_cast<Elem>((g.high >> 26) & kPackMask);
}

// Elements must be < 2^30 so that no bits collide.
Group JoinGroup(const Elem* in) {
  const std::uint64_t e0 = in[0], e1 = in[1], e2 = in[2], e3 = in[3];
  return {e0 | (e1 << 30) | (e2 << 60), (e2 >> 4) | (e3 << 26)};
}

}  // namespace

void Pack(std::span<const std::uint8_t> in, std::span<Elem> out) {
  const std::size_t needed = ElemsForBytes(in.size());
  if (out.size() < needed) {
    // Writing past `out` would corrupt memory; a caller bug, so refuse loudly.
    std::fprintf(stderr, "s3oram: field::Pack needs %zu elements, got %zu\n", needed, out.size());
    std::abort();
  }
  std::size_t byte = 0;
  std::size_t elem = 0;
  for (; byte < in.size(); byte += kPackBytes, elem += kPackElems) {
    const std::size_t count = std::min(kPackBytes, in.size() - byte);
    SplitGroup(LoadGroup(in.data() + byte, count), out.data() + elem);
  }
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(elem), out.end(), Elem{0});
}

bool Unpack(std::span<const Elem> in, std::span<std::uint8_t> out) {
  // Every element is checked, including ones past what `out` needs: Pack writes
  // zeros there, so anything >= 2^30 anywhere means the input is not a packing.
  bool valid = std::all_of(in.begin(), in.end(), [](Elem e) { return e <= kPackMask; });
  std::size_t byte = 0;
  std::size_t elem = 0;
  for (; byte < out.size(); byte += kPackBytes, elem += kPackElems) {
    std::array<Elem, kPackElems> group{};
    // A short `in` is treated as zero-extended, and reported as invalid.
    for (std::size_t k = 0; k < kPackElems; ++k) {
      if (elem + k < in.size()) group[k] = static_cast<Elem>(in[elem + k] & kPackMask);
    }
    const std::size_t count = std::min(kPackBytes, out.size() - byte);
    const Group g = JoinGroup(group.data());
    if (count < kPackBytes) {
      // Pack zero-pads a short final group: bits past `count` bytes must be 0.
      std::array<std::uint8_t, 16> whole;
      StoreGroup(g, whole.data(), whole.size());
      valid &= std::all_of(whole.begin() + static_cast<std::ptrdiff_t>(count), whole.end(),
                           [](std::uint8_t b) { return b == 0; });
    }
    StoreGroup(g, out.data() + byte, count);
  }
  if (in.size() < ElemsForBytes(out.size())) valid = false;
  // ... and elements past the packing must be 0, so that exactly one element
  // sequence unpacks to each byte string (a change anywhere is visible).
  for (std::size_t k = ElemsForBytes(out.size()); k < in.size(); ++k) valid &= in[k] == 0;
  return valid;
}

bool AllCanonical(std::span<const Elem> v) {
  // Branch-free so that the compiler vectorises it; inputs are whole shares.
  Elem largest = 0;
  for (Elem e : v) largest = std::max(largest, e);
  return largest < kPrime;
}

}  // namespace s3oram::field

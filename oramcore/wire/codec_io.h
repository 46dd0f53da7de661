// The three I/O objects of the wire codec (oramcore/wire/wire.cpp walks
// every body layout once, as a `Fields` function, through one of them):
//   * Sizer  counts the bytes a body will take (so Encode allocates once),
//   * Writer appends little-endian bytes to the output,
//   * Reader parses them back with bounds, range and canonicality checks;
// its first failure sticks (status()) and every later read returns zero.
// Internal to the codec: nothing outside wire.cpp includes it.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/elem_packing.h"
#include "oramcore/math/field.h"
#include "oramcore/wire/wire_limits.h"

namespace s3oram::wire::codec_io {

using field::Elem;

static_assert(sizeof(Elem) == 4, "elements are held as u32");

// Largest body any message can have: one vector at the cap plus a few fixed
// fields. Keeps the u32 body length field from ever wrapping.
static_assert(std::uint64_t{kMaxElems} * sizeof(Elem) + 4096 + kMaxString < std::uint64_t{1} << 32,
              "a maximal body must fit the u32 length field");

// Contract violations by our own code (not by a peer): a vector that no decoder
// would accept. There is no way to report it through Encode's signature, and
// emitting a frame the peer must reject would only move the failure elsewhere.
[[noreturn]] inline void EncodeContractViolation(const char* what, std::size_t n) {
  std::fprintf(stderr,
               "s3oram::wire::Encode: %s has %zu entries, above its limit (kMaxElems = %u)\n", what,
               n, kMaxElems);
  std::abort();
}

// Strings are diagnostic text only (error messages); an over-long one is cut
// at kMaxString, backing off to a UTF-8 boundary so the result stays valid text.
inline std::string_view ClipString(const std::string& s) {
  if (s.size() <= kMaxString) return s;
  std::size_t n = kMaxString;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string_view(s).substr(0, n);
}

// ---------------------------------------------------------------------------
// Encoding side.

// Counts the bytes Writer will produce for the same field walk.
class Sizer {
 public:
  static constexpr bool kWriting = true;
  void U8(const std::uint8_t&, const char*) { n_ += 1; }
  void U16(const std::uint16_t&, const char*) { n_ += 2; }
  void U32(const std::uint32_t&, const char*) { n_ += 4; }
  void U64(const std::uint64_t&, const char*) { n_ += 8; }
  void Bool(const bool&, const char*) { n_ += 1; }
  void String(const std::string& s, const char*) { n_ += 4 + ClipString(s).size(); }
  void Elems(const std::vector<Elem>& v, const char* name) {
    if (v.size() > kMaxElems) EncodeContractViolation(name, v.size());
    n_ += 4 + PackedElemBytes(v.size());
  }
  void Flags(const std::vector<std::uint8_t>& v, const char* name) {
    if (v.size() > kMaxElems) EncodeContractViolation(name, v.size());
    n_ += 4 + v.size();
  }
  void Indices(const std::vector<std::uint32_t>& v, const char* name) {
    if (v.size() > kMaxParties) EncodeContractViolation(name, v.size());
    n_ += 4 + 4 * v.size();
  }
  template <std::size_t N>
  void Fixed(const std::array<std::uint8_t, N>&, const char*) {
    n_ += N;
  }
  std::size_t size() const { return n_; }

 private:
  std::size_t n_ = 0;
};

// Appends to a vector whose capacity the caller reserved from Sizer, so no
// append reallocates. Writing past the reservation is still safe (the vector
// grows); Encode checks afterwards that the sizes agreed.
class Writer {
 public:
  static constexpr bool kWriting = true;
  explicit Writer(std::vector<std::uint8_t>& out) : out_(out) {}

  void U8(const std::uint8_t& v, const char*) { out_.push_back(v); }
  void U16(const std::uint16_t& v, const char*) { Le(v, 2); }
  void U32(const std::uint32_t& v, const char*) { Le(v, 4); }
  void U64(const std::uint64_t& v, const char*) { Le(v, 8); }
  void Bool(const bool& v, const char*) { out_.push_back(v ? 1 : 0); }
  void String(const std::string& s, const char*) {
    std::string_view clipped = ClipString(s);
    Le(clipped.size(), 4);
    const auto* p = reinterpret_cast<const std::uint8_t*>(clipped.data());
    out_.insert(out_.end(), p, p + clipped.size());
  }
  void Elems(std::span<const Elem> v, const char* name) {
    if (v.size() > kMaxElems) EncodeContractViolation(name, v.size());
    Le(v.size(), 4);
    const std::size_t at = out_.size();
    out_.resize(at + PackedElemBytes(v.size()));
    if (!PackElems(v, out_.data() + at)) {
      std::fprintf(stderr, "s3oram::wire::Encode: %s holds a value of 2^31 or more\n", name);
      std::abort();
    }
  }
  void Flags(const std::vector<std::uint8_t>& v, const char* name) {
    if (v.size() > kMaxElems) EncodeContractViolation(name, v.size());
    Le(v.size(), 4);
    // Normalised to 0/1: the decoder accepts nothing else.
    for (std::uint8_t b : v) out_.push_back(b ? 1 : 0);
  }
  void Indices(const std::vector<std::uint32_t>& v, const char* name) {
    if (v.size() > kMaxParties) EncodeContractViolation(name, v.size());
    Le(v.size(), 4);
    for (std::uint32_t x : v) Le(x, 4);
  }
  template <std::size_t N>
  void Fixed(const std::array<std::uint8_t, N>& a, const char*) {
    out_.insert(out_.end(), a.begin(), a.end());
  }
  // Overwrites 4 bytes at `at` (the body length, known only after the body).
  void PatchU32(std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out_[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
  }

 private:
  void Le(std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  std::vector<std::uint8_t>& out_;
};

// ---------------------------------------------------------------------------
// Decoding side.

// Reads from a fixed span. The first failure is recorded and every later read
// becomes a no-op returning zeros, so a Fields walk needs no error plumbing;
// the caller checks status() once at the end. No read ever goes past the span
// and no allocation is larger than the bytes actually present.
class Reader {
 public:
  static constexpr bool kWriting = false;
  Reader(std::span<const std::uint8_t> in, const char* context) : in_(in), context_(context) {}

  void U8(std::uint8_t& v, const char* name) { v = static_cast<std::uint8_t>(Le(1, name)); }
  void U16(std::uint16_t& v, const char* name) { v = static_cast<std::uint16_t>(Le(2, name)); }
  void U32(std::uint32_t& v, const char* name) { v = static_cast<std::uint32_t>(Le(4, name)); }
  void U64(std::uint64_t& v, const char* name) { v = Le(8, name); }
  void Bool(bool& v, const char* name) {
    std::uint8_t b = static_cast<std::uint8_t>(Le(1, name));
    // Only 0 and 1 are valid, so every boolean has exactly one encoding and a
    // flipped bit is caught rather than silently read as `true`.
    if (b > 1) Fail(std::string(name) + ": boolean byte is " + std::to_string(b) + ", not 0 or 1");
    v = b == 1;
  }
  void Bytes(std::uint8_t* dst, std::size_t n, const char* name) {
    if (!Need(n, name)) return;
    std::memcpy(dst, in_.data() + pos_, n);
    pos_ += n;
  }
  void String(std::string& s, const char* name) {
    std::uint32_t len = 0;
    U32(len, name);
    if (!ok()) return;
    if (len > kMaxString) {
      Fail(std::string(name) + ": string length " + std::to_string(len) + " exceeds limit " +
           std::to_string(kMaxString));
      return;
    }
    if (!Need(len, name)) return;
    s.assign(reinterpret_cast<const char*>(in_.data() + pos_), len);
    pos_ += len;
  }
  void Elems(std::vector<Elem>& v, const char* name) {
    std::uint32_t count = 0;
    U32(count, name);
    if (!ok()) return;
    // Both checks happen before allocating: the cap bounds what an honest peer
    // may send, and the remaining-bytes check ties the allocation to the frame
    // actually received (a 40-byte frame claiming 2^31 elements allocates nothing).
    if (count > kMaxElems) {
      Fail(std::string(name) + ": element count " + std::to_string(count) + " exceeds limit " +
           std::to_string(kMaxElems));
      return;
    }
    const std::size_t bytes = PackedElemBytes(count);
    if (!Need(bytes, name)) return;
    v.resize(count);
    // Every element must be canonical (< p): arithmetic downstream assumes it,
    // and with zero padding bits each vector has exactly one encoding.
    std::string why;
    if (!UnpackElems(in_.subspan(pos_, bytes), v, &why)) {
      Fail(std::string(name) + ": " + why);
      v.clear();
      return;
    }
    pos_ += bytes;
  }

  void Flags(std::vector<std::uint8_t>& v, const char* name) {
    std::uint32_t count = 0;
    U32(count, name);
    if (!ok()) return;
    if (count > kMaxElems) {
      Fail(std::string(name) + ": flag count " + std::to_string(count) + " exceeds limit " +
           std::to_string(kMaxElems));
      return;
    }
    if (!Need(count, name)) return;
    v.assign(in_.data() + pos_, in_.data() + pos_ + count);
    pos_ += count;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i] > 1) {
        Fail(std::string(name) + ": flag " + std::to_string(i) + " is " + std::to_string(v[i]) +
             ", not 0 or 1");
        v.clear();
        return;
      }
    }
  }
  void Indices(std::vector<std::uint32_t>& v, const char* name) {
    std::uint32_t count = 0;
    U32(count, name);
    if (!ok()) return;
    if (count > kMaxParties) {
      Fail(std::string(name) + ": " + std::to_string(count) + " entries exceed limit " +
           std::to_string(kMaxParties));
      return;
    }
    if (!Need(std::size_t{count} * 4, name)) return;
    v.resize(count);
    for (auto& x : v) U32(x, name);
  }
  template <std::size_t N>
  void Fixed(std::array<std::uint8_t, N>& a, const char* name) {
    Bytes(a.data(), N, name);
  }

  std::size_t remaining() const { return in_.size() - pos_; }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  void Fail(const std::string& what) {
    if (status_.ok()) status_ = Status::Corruption(std::string(context_) + ": " + what);
  }

 private:
  bool Need(std::size_t n, const char* name) {
    if (!ok()) return false;
    if (n > remaining()) {
      Fail(std::string(name) + ": needs " + std::to_string(n) + " bytes, only " +
           std::to_string(remaining()) + " left (truncated)");
      return false;
    }
    return true;
  }
  std::uint64_t Le(int bytes, const char* name) {
    if (!Need(static_cast<std::size_t>(bytes), name)) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= std::uint64_t{in_[pos_ + i]} << (8 * i);
    pos_ += static_cast<std::size_t>(bytes);
    return v;
  }

  std::span<const std::uint8_t> in_;
  std::size_t pos_ = 0;
  const char* context_;
  Status status_;
};

}  // namespace s3oram::wire::codec_io

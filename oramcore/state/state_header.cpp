#include "oramcore/state/state_header.h"

#include <sodium.h>

#include <algorithm>
#include <cstring>

#include "oramcore/state/sealed_vfs.h"

namespace s3oram {
namespace {

constexpr std::array<std::uint8_t, 8> kMagic = {'S', '3', 'O', 'R', 'S', 'T', 'A', 'T'};
constexpr std::size_t kLegacyFieldBytes = 144;
constexpr std::size_t kFieldBytes = kLegacyFieldBytes + 16;  // and the binding nonce
constexpr std::size_t kChecksumBytes = 32;
static_assert(kFieldBytes + kChecksumBytes == kStateHeaderUsedBytes);
static_assert(2 * kStateHeaderCopyBytes == kSealedHeaderBytes);
// Where the sealed VFS looks for them in copy 0.
static_assert(kSealedFormatOffset == 8 && kSealedBindingOffset == kLegacyFieldBytes &&
              kSealedBindingBytes == 16);
static_assert(kSealedLegacyFormat == kStateLegacyFormat && kSealedBoundFormat == kStateFormat);

std::size_t FieldBytes(std::uint32_t format) {
  return format == kStateLegacyFormat ? kLegacyFieldBytes : kFieldBytes;
}

class Out {
 public:
  explicit Out(std::vector<std::uint8_t>& v) : v_(v) {}
  void Le(std::uint64_t x, int bytes) {
    for (int i = 0; i < bytes; ++i) v_.push_back(static_cast<std::uint8_t>(x >> (8 * i)));
  }
  template <std::size_t N>
  void Raw(const std::array<std::uint8_t, N>& a) {
    v_.insert(v_.end(), a.begin(), a.end());
  }

 private:
  std::vector<std::uint8_t>& v_;
};

class In {
 public:
  explicit In(std::span<const std::uint8_t> s) : s_(s) {}
  std::uint64_t Le(int bytes) {
    std::uint64_t x = 0;
    for (int i = 0; i < bytes; ++i) x |= std::uint64_t{s_[pos_ + i]} << (8 * i);
    pos_ += static_cast<std::size_t>(bytes);
    return x;
  }
  template <std::size_t N>
  void Raw(std::array<std::uint8_t, N>& a) {
    std::copy(s_.begin() + static_cast<std::ptrdiff_t>(pos_),
              s_.begin() + static_cast<std::ptrdiff_t>(pos_ + N), a.begin());
    pos_ += N;
  }

 private:
  std::span<const std::uint8_t> s_;
  std::size_t pos_ = 0;
};

std::array<std::uint8_t, kChecksumBytes> Checksum(std::span<const std::uint8_t> fields) {
  std::array<std::uint8_t, kChecksumBytes> out{};
  crypto_generichash(out.data(), out.size(), fields.data(), fields.size(), nullptr, 0);
  return out;
}

// The copy's header, or the reason it is not one.
Result<StateHeader> ParseCopy(std::span<const std::uint8_t> copy) {
  if (!std::equal(kMagic.begin(), kMagic.end(), copy.begin())) {
    return Status::Corruption("no state header magic");
  }
  In in(copy.subspan(kMagic.size()));
  const auto format = static_cast<std::uint32_t>(in.Le(4));
  if (format != kStateFormat && format != kStateLegacyFormat) {
    return Status::Corruption("state format " + std::to_string(format) + ", this build reads " +
                              std::to_string(kStateLegacyFormat) + " and " +
                              std::to_string(kStateFormat));
  }
  const std::size_t fields = FieldBytes(format);
  const std::size_t used = fields + kChecksumBytes;
  const auto sum = Checksum(copy.first(fields));
  if (sodium_memcmp(sum.data(), copy.data() + fields, kChecksumBytes) != 0) {
    return Status::Corruption("checksum mismatch in bytes 0-" + std::to_string(fields - 1));
  }
  const auto tail = copy.subspan(used);
  if (auto nz = std::find_if(tail.begin(), tail.end(), [](std::uint8_t b) { return b != 0; });
      nz != tail.end()) {
    return Status::Corruption("nonzero byte at offset " +
                              std::to_string(used + (nz - tail.begin())) + " of the padding");
  }
  const auto page = static_cast<std::uint32_t>(in.Le(4));
  if (page != kSealedPageBytes) {
    return Status::Corruption("page size " + std::to_string(page) + ", expected " +
                              std::to_string(kSealedPageBytes));
  }
  StateHeader h;
  h.format = format;
  h.generation = in.Le(8);
  in.Raw(h.fs_id);
  h.wrap.kdf.ops = in.Le(8);
  h.wrap.kdf.mem_bytes = in.Le(8);
  in.Raw(h.wrap.salt);
  in.Raw(h.wrap.nonce);
  in.Raw(h.wrap.sealed);
  if (format == kStateFormat) in.Raw(h.binding);
  return h;
}

}  // namespace

std::vector<std::uint8_t> EncodeStateHeaderCopy(const StateHeader& h) {
  std::vector<std::uint8_t> v;
  v.reserve(kStateHeaderCopyBytes);
  Out out(v);
  out.Raw(kMagic);
  out.Le(h.format, 4);
  out.Le(kSealedPageBytes, 4);
  out.Le(h.generation, 8);
  out.Raw(h.fs_id);
  out.Le(h.wrap.kdf.ops, 8);
  out.Le(h.wrap.kdf.mem_bytes, 8);
  out.Raw(h.wrap.salt);
  out.Raw(h.wrap.nonce);
  out.Raw(h.wrap.sealed);
  if (h.format != kStateLegacyFormat) out.Raw(h.binding);
  out.Raw(Checksum(v));
  v.resize(kStateHeaderCopyBytes, 0);
  return v;
}

std::vector<std::uint8_t> EncodeStateHeader(const StateHeader& h) {
  std::vector<std::uint8_t> v = EncodeStateHeaderCopy(h);
  const std::vector<std::uint8_t> second = v;
  v.insert(v.end(), second.begin(), second.end());
  return v;
}

Result<std::vector<StateHeader>> ParseStateHeader(std::span<const std::uint8_t> region,
                                                  const std::string& what) {
  if (LooksLikePlainSqlite(region)) {
    return Status::FailedPrecondition(
        what +
        " is an unencrypted client state from an earlier version of s3oram: encrypt it "
        "with `s3oram upgrade-state " +
        what + "`");
  }
  if (region.size() < kSealedHeaderBytes) {
    return Status::Corruption(what + " is " + std::to_string(region.size()) +
                              " bytes, shorter than the state header (" +
                              std::to_string(kSealedHeaderBytes) + "): it was truncated");
  }
  Result<StateHeader> copies[2] = {
      ParseCopy(region.first(kStateHeaderCopyBytes)),
      ParseCopy(region.subspan(kStateHeaderCopyBytes, kStateHeaderCopyBytes))};
  for (int i = 0; i < 2; ++i) {
    if (!copies[i].ok()) {
      if (i == 0 && !copies[1].ok() && copies[0].status().message() == "no state header magic" &&
          copies[1].status().message() == "no state header magic") {
        return Status::Corruption(what + " is not an s3oram client state (no state header)");
      }
      return Status::Corruption(what + ": state header copy " + std::to_string(i) + " (bytes " +
                                std::to_string(i * kStateHeaderCopyBytes) + "-" +
                                std::to_string((i + 1) * kStateHeaderCopyBytes - 1) +
                                ") is damaged: " + copies[i].status().message() +
                                ". Restore the state from the servers' backup (s3oram restore)");
    }
  }
  const StateHeader& a = *copies[0];
  const StateHeader& b = *copies[1];
  if (a == b) return std::vector<StateHeader>{a};
  if (a.fs_id != b.fs_id || a.generation == b.generation) {
    return Status::Corruption(what + ": the two copies of the state header disagree (" +
                              std::string(a.fs_id != b.fs_id ? "filesystem id" : "key wrap") +
                              "). Restore the state from the servers' backup (s3oram restore)");
  }
  // A passphrase change cut short: the newer copy first.
  return a.generation > b.generation ? std::vector<StateHeader>{a, b}
                                     : std::vector<StateHeader>{b, a};
}

bool LooksLikePlainSqlite(std::span<const std::uint8_t> prefix) {
  static constexpr char kSqliteMagic[16] = "SQLite format 3";  // with its NUL
  return prefix.size() >= 16 && std::memcmp(prefix.data(), kSqliteMagic, 16) == 0;
}

}  // namespace s3oram

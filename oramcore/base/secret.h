// Secret: bytes that must not outlive their use (keys, passphrases).
//
// Guarantees: the bytes live in libsodium's guarded allocation (sodium_malloc:
// guard pages around it, locked into RAM where the system allows, so they are
// not swapped out) and are zeroed when the Secret is destroyed or moved from.
// Secrets are move-only, never printed, and compared only in constant time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace s3oram {

class Secret {
 public:
  Secret() = default;
  // `size` zero bytes (aborts if the guarded allocation fails: there is no
  // safe way to continue handling key material without it).
  explicit Secret(std::size_t size);
  // A copy of `bytes` (the caller zeroes its own copy).
  static Secret CopyOf(std::span<const std::uint8_t> bytes);
  static Secret CopyOf(std::string_view text);
  ~Secret();
  Secret(Secret&& other) noexcept;
  Secret& operator=(Secret&& other) noexcept;
  Secret(const Secret&) = delete;
  Secret& operator=(const Secret&) = delete;

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::uint8_t* data() { return data_; }
  const std::uint8_t* data() const { return data_; }
  std::span<std::uint8_t> bytes() { return {data_, size_}; }
  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  // Constant-time equality (sizes are not secret).
  bool Equals(const Secret& other) const;

 private:
  void Release();
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace s3oram

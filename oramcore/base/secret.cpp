#include "oramcore/base/secret.h"

#include <sodium.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "oramcore/base/random.h"

namespace s3oram {

Secret::Secret(std::size_t size) : size_(size) {
  random::EnsureInitialized();
  if (size == 0) return;
  data_ = static_cast<std::uint8_t*>(sodium_malloc(size));
  if (data_ == nullptr) std::abort();
  sodium_memzero(data_, size);
}

Secret Secret::CopyOf(std::span<const std::uint8_t> bytes) {
  Secret s(bytes.size());
  if (!bytes.empty()) std::memcpy(s.data_, bytes.data(), bytes.size());
  return s;
}

Secret Secret::CopyOf(std::string_view text) {
  return CopyOf(std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(text.data()),
                                              text.size()));
}

Secret::~Secret() { Release(); }

void Secret::Release() {
  if (data_ != nullptr) sodium_free(data_);  // zeroes before freeing
  data_ = nullptr;
  size_ = 0;
}

Secret::Secret(Secret&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

Secret& Secret::operator=(Secret&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

bool Secret::Equals(const Secret& other) const {
  if (size_ != other.size_) return false;
  if (size_ == 0) return true;
  return sodium_memcmp(data_, other.data_, size_) == 0;
}

}  // namespace s3oram

#include "oramcore/random.h"

#include <sodium.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace s3oram::random {

void EnsureInitialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (sodium_init() < 0) {
      std::fputs("s3oram: libsodium failed to initialise; refusing to run without a CSPRNG\n",
                 stderr);
      std::abort();
    }
  });
}

void Bytes(std::span<std::uint8_t> out) {
  EnsureInitialized();
  randombytes_buf(out.data(), out.size());
}

std::uint64_t Below(std::uint64_t bound) {
  EnsureInitialized();
  if (bound <= 0xffffffffull) return randombytes_uniform(static_cast<std::uint32_t>(bound));
  // Rejection sampling on 64-bit words: reject the top partial interval.
  const std::uint64_t limit = ~0ull - (~0ull % bound);
  for (;;) {
    std::uint64_t x;
    randombytes_buf(&x, sizeof x);
    if (x < limit) return x % bound;
  }
}

void Elems(std::span<field::Elem> out) {
  EnsureInitialized();
  randombytes_buf(out.data(), out.size_bytes());
  for (auto& e : out) {
    e &= field::kPrime;
    // Probability 2^-31 per element; redraw until canonical.
    while (e == field::kPrime) {
      randombytes_buf(&e, sizeof e);
      e &= field::kPrime;
    }
  }
}

}  // namespace s3oram::random

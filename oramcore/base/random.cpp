#include "oramcore/base/random.h"

#include <sodium.h>

#include <algorithm>
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
  // Small requests go straight to the OS. Large ones (shares of whole blocks,
  // matrices, SMP masks: megabytes per eviction) would be syscall-bound on
  // libsodium's sysrandom backend (~170 MB/s here), so each is the ChaCha20
  // keystream of a fresh 256-bit key drawn from the OS for this call alone:
  // the same construction as libsodium's internal generator, with no state kept
  // between calls (the key is zeroed before returning).
  constexpr std::size_t kDirect = 256;
  // ChaCha20-IETF has a 32-bit block counter: at most 2^32 * 64 bytes per key.
  constexpr std::size_t kMaxPerKey = std::size_t{1} << 37;
  if (out.size() <= kDirect) {
    randombytes_buf(out.data(), out.size());
    return;
  }
  static constexpr unsigned char kNonce[crypto_stream_chacha20_ietf_NONCEBYTES] = {};
  unsigned char key[crypto_stream_chacha20_ietf_KEYBYTES];
  for (std::size_t off = 0; off < out.size(); off += kMaxPerKey) {
    const std::size_t n = std::min(kMaxPerKey, out.size() - off);
    randombytes_buf(key, sizeof key);
    // A key is used for exactly one keystream, so a fixed nonce never repeats under it.
    crypto_stream_chacha20_ietf(out.data() + off, n, kNonce, key);
  }
  sodium_memzero(key, sizeof key);
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

}  // namespace s3oram::random

#include "oramcore/crypto/block_seal.h"

#include <sodium.h>

#include <algorithm>
#include <array>
#include <cstdlib>

#include "oramcore/base/random.h"
#include "oramcore/crypto/subkeys.h"

namespace s3oram {
namespace {

static_assert(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES == kSealNonceBytes);
static_assert(crypto_aead_xchacha20poly1305_ietf_ABYTES == kSealTagBytes);
static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == kSubkeyBytes);

constexpr std::size_t kLabelBytes = 16;
constexpr std::array<std::uint8_t, kLabelBytes> kLabel = {'s', '3', 'o', 'r', 'a', 'm', ' ', 'b',
                                                          'l', 'o', 'c', 'k', ' ', 'v', '1', 0};
using Ad = std::array<std::uint8_t, kLabelBytes + 16 + 8 + 8>;

Ad MakeAd(const FsId& fs_id, std::uint64_t block_id, std::uint64_t version) {
  static_assert(sizeof(FsId) == 16);
  Ad ad{};
  std::copy(kLabel.begin(), kLabel.end(), ad.begin());
  std::copy(fs_id.begin(), fs_id.end(), ad.begin() + kLabelBytes);
  for (int i = 0; i < 8; ++i) {
    ad[kLabelBytes + 16 + i] = static_cast<std::uint8_t>(block_id >> (8 * i));
    ad[kLabelBytes + 24 + i] = static_cast<std::uint8_t>(version >> (8 * i));
  }
  return ad;
}

}  // namespace

BlockSealer::BlockSealer(const Secret& master, const FsId& fs_id)
    : key_(DeriveBlockKey(master)), fs_id_(fs_id) {}

void BlockSealer::Seal(std::uint64_t block_id, std::uint64_t version,
                       std::span<const std::uint8_t> plaintext, std::span<std::uint8_t> out) const {
  if (out.size() != plaintext.size() + kSealOverhead) std::abort();
  const Ad ad = MakeAd(fs_id_, block_id, version);
  std::span<std::uint8_t> nonce = out.first(kSealNonceBytes);
  random::Bytes(nonce);
  unsigned long long len = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(out.data() + kSealNonceBytes, &len, plaintext.data(),
                                             plaintext.size(), ad.data(), ad.size(), nullptr,
                                             nonce.data(), key_.data());
}

bool BlockSealer::Open(std::uint64_t block_id, std::uint64_t version,
                       std::span<const std::uint8_t> sealed, std::span<std::uint8_t> out) const {
  if (sealed.size() != out.size() + kSealOverhead) std::abort();
  const Ad ad = MakeAd(fs_id_, block_id, version);
  if (OpenUnder(key_, ad, sealed, out)) return true;
  return !previous_key_.empty() && OpenUnder(previous_key_, ad, sealed, out);
}

void BlockSealer::AcceptPrevious(const Secret& previous_master) {
  previous_key_ = DeriveBlockKey(previous_master);
}

bool BlockSealer::OpenUnder(const Secret& key, std::span<const std::uint8_t> ad,
                            std::span<const std::uint8_t> sealed,
                            std::span<std::uint8_t> out) const {
  unsigned long long len = 0;
  // libsodium checks the tag in constant time and writes nothing on failure.
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(
          out.data(), &len, nullptr, sealed.data() + kSealNonceBytes,
          sealed.size() - kSealNonceBytes, ad.data(), ad.size(), sealed.data(),
          key.data()) != 0) {
    std::fill(out.begin(), out.end(), 0);
    return false;
  }
  return true;
}

}  // namespace s3oram

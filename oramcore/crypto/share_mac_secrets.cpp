#include "oramcore/crypto/share_mac_secrets.h"

#include <cstdlib>

#include "oramcore/base/random.h"
#include "oramcore/crypto/subkeys.h"

namespace s3oram {

ShareMacSecrets ShareMacSecrets::Copy() const {
  ShareMacSecrets out;
  for (std::size_t h = 0; h < share_mac::kHalves; ++h)
    out.half[h] = Secret::CopyOf(half[h].bytes());
  out.last_replaced = last_replaced;
  return out;
}

bool ShareMacSecrets::Equals(const ShareMacSecrets& other) const {
  bool same = last_replaced == other.last_replaced;
  for (std::size_t h = 0; h < share_mac::kHalves; ++h) same &= half[h].Equals(other.half[h]);
  return same;
}

ShareMacSecrets DeriveShareMacSecrets(const Secret& master) {
  ShareMacSecrets out;
  for (Secret& s : out.half) s = DeriveShareMacKey(master);
  return out;
}

ShareMacSecrets RotateShareMacSecrets(const ShareMacSecrets& from) {
  ShareMacSecrets out = from.Copy();
  out.last_replaced = (from.last_replaced + 1) % share_mac::kHalves;
  Secret fresh(share_mac::kKeyBytes);
  random::Bytes(fresh.bytes());
  out.half[out.last_replaced] = std::move(fresh);
  return out;
}

std::optional<std::size_t> SharedHalf(const ShareMacSecrets& a, const ShareMacSecrets& b) {
  std::optional<std::size_t> shared;
  for (std::size_t h = 0; h < share_mac::kHalves; ++h) {
    if (a.half[h].Equals(b.half[h]) && !shared) shared = h;
  }
  return shared;
}

std::unique_ptr<share_mac::ShareMacKey> MakeShareMacKey(const ShareMacSecrets& secrets,
                                                        std::size_t data_elems) {
  for (const Secret& s : secrets.half) {
    if (s.size() != share_mac::kKeyBytes) std::abort();  // programming error, not input
  }
  return std::make_unique<share_mac::ShareMacKey>(
      share_mac::SecretSpan(secrets.half[0].data(), share_mac::kKeyBytes),
      share_mac::SecretSpan(secrets.half[1].data(), share_mac::kKeyBytes), data_elems);
}

}  // namespace s3oram

#include "oramcore/crypto/subkeys.h"

#include <sodium.h>

#include <cstdint>
#include <cstdlib>

#include "oramcore/crypto/key_wrap.h"

namespace s3oram {
namespace {

static_assert(crypto_kdf_KEYBYTES == kMasterKeyBytes);
static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == kSubkeyBytes);
static_assert(kSubkeyBytes >= crypto_kdf_BYTES_MIN && kSubkeyBytes <= crypto_kdf_BYTES_MAX);

using Context = char[crypto_kdf_CONTEXTBYTES + 1];

Secret Derive(const Secret& master, const Context& context, std::uint64_t id) {
  if (master.size() != kMasterKeyBytes) std::abort();  // programming error, not input
  Secret key(kSubkeyBytes);
  crypto_kdf_derive_from_key(key.data(), key.size(), id, context, master.data());
  return key;
}

constexpr Context kBlockContext = "s3oblock";
constexpr Context kStateContext = "s3ostate";
constexpr Context kBackupContext = "s3obakup";
constexpr Context kShareMacContext = "s3osmac_";

}  // namespace

Secret DeriveBlockKey(const Secret& master) { return Derive(master, kBlockContext, 1); }
Secret DeriveStateKey(const Secret& master) { return Derive(master, kStateContext, 1); }
Secret DeriveBackupKey(const Secret& master) { return Derive(master, kBackupContext, 1); }
Secret DeriveShareMacKey(const Secret& master) { return Derive(master, kShareMacContext, 1); }

}  // namespace s3oram

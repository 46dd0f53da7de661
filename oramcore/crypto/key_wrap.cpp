#include "oramcore/crypto/key_wrap.h"

#include <sodium.h>

#include <algorithm>
#include <array>
#include <string>

#include "oramcore/base/random.h"

namespace s3oram {
namespace {

static_assert(crypto_pwhash_argon2id_SALTBYTES == 16);
static_assert(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES == 24);
static_assert(crypto_aead_xchacha20poly1305_ietf_ABYTES == 16);
static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == 32);

// Associated data of the wrap: a label, the filesystem id and the KDF cost.
constexpr std::array<std::uint8_t, 16> kWrapLabel = {'s', '3', 'o', 'r', 'a', 'm', ' ', 'k',
                                                     'e', 'y', 'w', 'r', 'a', 'p', '1', 0};
using WrapAdBytes = std::array<std::uint8_t, 16 + 16 + 8 + 8>;

WrapAdBytes WrapAd(const FsId& fs_id, const KdfParams& kdf) {
  static_assert(sizeof(FsId) == 16);
  WrapAdBytes ad{};
  std::copy(kWrapLabel.begin(), kWrapLabel.end(), ad.begin());
  std::copy(fs_id.begin(), fs_id.end(), ad.begin() + 16);
  for (int i = 0; i < 8; ++i) {
    ad[32 + i] = static_cast<std::uint8_t>(kdf.ops >> (8 * i));
    ad[40 + i] = static_cast<std::uint8_t>(kdf.mem_bytes >> (8 * i));
  }
  return ad;
}

Result<Secret> DeriveWrappingKey(const Secret& passphrase, const std::array<std::uint8_t, 16>& salt,
                                 const KdfParams& kdf) {
  S3ORAM_RETURN_IF_ERROR(ValidateKdfParams(kdf));
  Secret key(crypto_aead_xchacha20poly1305_ietf_KEYBYTES);
  // libsodium takes a char pointer; an empty passphrase is allowed by the
  // algorithm but refused by callers (ReadPassphrase).
  if (crypto_pwhash(key.data(), key.size(), reinterpret_cast<const char*>(passphrase.data()),
                    passphrase.size(), salt.data(), kdf.ops, static_cast<std::size_t>(kdf.mem_bytes),
                    crypto_pwhash_ALG_ARGON2ID13) != 0) {
    return Status::IoError("Argon2id could not allocate " + std::to_string(kdf.mem_bytes >> 20) +
                           " MiB for the passphrase key derivation");
  }
  return key;
}

}  // namespace

KdfParams DefaultKdfParams() {
  return KdfParams{crypto_pwhash_argon2id_OPSLIMIT_MODERATE,
                   crypto_pwhash_argon2id_MEMLIMIT_MODERATE};
}

KdfParams MinimalKdfParams() {
  return KdfParams{crypto_pwhash_argon2id_OPSLIMIT_MIN, crypto_pwhash_argon2id_MEMLIMIT_MIN};
}

Status ValidateKdfParams(const KdfParams& kdf) {
  if (kdf.ops < crypto_pwhash_argon2id_OPSLIMIT_MIN ||
      kdf.ops > crypto_pwhash_argon2id_OPSLIMIT_MAX) {
    return Status::InvalidArgument("Argon2id passes must be in [" +
                                   std::to_string(crypto_pwhash_argon2id_OPSLIMIT_MIN) + ", " +
                                   std::to_string(crypto_pwhash_argon2id_OPSLIMIT_MAX) + "], got " +
                                   std::to_string(kdf.ops));
  }
  // Capped at 64 GiB: far beyond any sensible setting, and keeps size_t casts exact.
  constexpr std::uint64_t kMaxMem = std::uint64_t{64} << 30;
  if (kdf.mem_bytes < crypto_pwhash_argon2id_MEMLIMIT_MIN || kdf.mem_bytes > kMaxMem) {
    return Status::InvalidArgument("Argon2id memory must be in [" +
                                   std::to_string(crypto_pwhash_argon2id_MEMLIMIT_MIN) + ", " +
                                   std::to_string(kMaxMem) + "] bytes, got " +
                                   std::to_string(kdf.mem_bytes));
  }
  return Status::Ok();
}

Status CheckKdfFloor(const KdfParams& kdf) {
  const bool enough_memory = kdf.mem_bytes >= kKdfFloorMemBytes;
  // Overflow-free: mem_bytes <= 64 GiB and ops <= 2^32 after validation, but
  // this check may run first, so divide instead of multiplying.
  const bool enough_work = kdf.ops != 0 && kdf.mem_bytes >= (kKdfFloorWork + kdf.ops - 1) / kdf.ops;
  const bool one_pass_ok = kdf.ops != 1 || kdf.mem_bytes >= kKdfFloorOnePassMemBytes;
  if (enough_memory && enough_work && one_pass_ok) return Status::Ok();
  return Status::InvalidArgument(
      "Argon2id cost " + std::to_string(kdf.ops) + " pass(es) x " +
      std::to_string(kdf.mem_bytes >> 10) +
      " KiB is below the floor (OWASP: 46 MiB x 1, 19 MiB x 2, 12 MiB x 3, 9 MiB x 4 or "
      "7 MiB x 5 passes): a stolen state file or backup would let a passphrase be guessed "
      "cheaply. Raise --kdf-mem/--kdf-ops, or give --insecure-kdf for a throwaway filesystem");
}

Secret NewMasterKey() {
  Secret key(kMasterKeyBytes);
  random::Bytes(key.bytes());
  return key;
}

Result<KeyWrap> WrapMasterKey(const Secret& master, const Secret& passphrase, const FsId& fs_id,
                              const KdfParams& kdf) {
  if (master.size() != kMasterKeyBytes) {
    return Status::InvalidArgument("a master key has " + std::to_string(kMasterKeyBytes) +
                                   " bytes");
  }
  KeyWrap wrap;
  wrap.kdf = kdf;
  random::Bytes(wrap.salt);
  random::Bytes(wrap.nonce);
  S3ORAM_ASSIGN_OR_RETURN(Secret kek, DeriveWrappingKey(passphrase, wrap.salt, kdf));
  const WrapAdBytes ad = WrapAd(fs_id, kdf);
  unsigned long long sealed_len = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(wrap.sealed.data(), &sealed_len, master.data(),
                                             master.size(), ad.data(), ad.size(), nullptr,
                                             wrap.nonce.data(), kek.data());
  if (sealed_len != wrap.sealed.size()) return Status::IoError("key wrap has an unexpected size");
  return wrap;
}

Result<Secret> UnwrapMasterKey(const KeyWrap& wrap, const Secret& passphrase, const FsId& fs_id) {
  S3ORAM_ASSIGN_OR_RETURN(Secret kek, DeriveWrappingKey(passphrase, wrap.salt, wrap.kdf));
  const WrapAdBytes ad = WrapAd(fs_id, wrap.kdf);
  Secret master(kMasterKeyBytes);
  unsigned long long len = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(master.data(), &len, nullptr, wrap.sealed.data(),
                                                 wrap.sealed.size(), ad.data(), ad.size(),
                                                 wrap.nonce.data(), kek.data()) != 0 ||
      len != kMasterKeyBytes) {
    return Status::PermissionDenied(
        "wrong passphrase (or the wrapped key in the state file was altered)");
  }
  return master;
}

}  // namespace s3oram

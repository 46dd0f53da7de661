// CURVE keypairs (ZeroMQ's CurveZMQ: Curve25519) for the client<->server and
// server<->server links, and the files that hold them.
//
// File formats (both one line of Z85 text, 40 characters):
//   NAME.key  the secret key; a private file (private_file.h: mode 0600,
//             owned by the reader, refused otherwise);
//   NAME.pub  the public key; may be world-readable, and is what goes into
//             the other side's configuration.
// A public key may also be given inline as its 40 Z85 characters.
//
// Guarantees: secret keys live only in Secret (zeroed after use); every key
// read from a file or a configuration is checked to be valid Z85 of exactly
// 32 bytes before use.
#pragma once

#include <string>
#include <string_view>

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"

namespace s3oram {

inline constexpr std::size_t kCurveKeyChars = 40;  // Z85 of 32 bytes

struct CurveKeypair {
  std::string public_key;  // Z85
  Secret secret_key;       // Z85, kCurveKeyChars bytes (no terminator)
};

Result<CurveKeypair> GenerateCurveKeypair();
// Writes PREFIX.key (0600, refuses to overwrite) and PREFIX.pub.
Status WriteCurveKeypair(const CurveKeypair& keys, const std::string& prefix);
// Reads a secret key file and derives its public key.
Result<CurveKeypair> LoadCurveKeypair(const std::string& secret_key_file);
// A public key given inline (40 Z85 characters) or as the path of a .pub
// file; `what` names it in errors.
Result<std::string> ResolvePublicKey(std::string_view key_or_file, const std::string& what);
// InvalidArgument unless `z85` is a valid 40-character Z85 key.
Status CheckZ85Key(std::string_view z85, const std::string& what);
// The keypair's secret key as 32 binary bytes (for ZMQ_CURVE_SECRETKEY).
Result<Secret> DecodeSecretKey(const CurveKeypair& keys);

}  // namespace s3oram

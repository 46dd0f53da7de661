#include "oramcore/curve_keys.h"

#include <sodium.h>
#include <sys/stat.h>
#include <zmq.h>

#include <array>
#include <cstring>
#include <fstream>
#include <sstream>

#include "oramcore/private_file.h"

namespace s3oram {
namespace {

std::string_view TrimLine(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) {
    s.remove_suffix(1);
  }
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

}  // namespace

Status CheckZ85Key(std::string_view z85, const std::string& what) {
  if (z85.size() != kCurveKeyChars) {
    return Status::InvalidArgument(what + " is not a CURVE key: expected " +
                                   std::to_string(kCurveKeyChars) + " Z85 characters, got " +
                                   std::to_string(z85.size()));
  }
  std::array<char, kCurveKeyChars + 1> text{};
  std::memcpy(text.data(), z85.data(), kCurveKeyChars);
  std::array<std::uint8_t, 32> bin{};
  const bool ok = zmq_z85_decode(bin.data(), text.data()) != nullptr;
  sodium_memzero(text.data(), text.size());
  sodium_memzero(bin.data(), bin.size());
  if (!ok) return Status::InvalidArgument(what + " is not valid Z85 text");
  return Status::Ok();
}

Result<CurveKeypair> GenerateCurveKeypair() {
  std::array<char, kCurveKeyChars + 1> pub{}, sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0) {
    return Status::FailedPrecondition("this libzmq cannot make CURVE keys (built without libsodium?)");
  }
  CurveKeypair k;
  k.public_key.assign(pub.data(), kCurveKeyChars);
  k.secret_key = Secret::CopyOf(std::string_view(sec.data(), kCurveKeyChars));
  sodium_memzero(sec.data(), sec.size());
  return k;
}

Status WriteCurveKeypair(const CurveKeypair& keys, const std::string& prefix) {
  Secret line(keys.secret_key.size() + 1);
  std::memcpy(line.data(), keys.secret_key.data(), keys.secret_key.size());
  line.data()[keys.secret_key.size()] = '\n';
  S3ORAM_RETURN_IF_ERROR(WritePrivateFile(prefix + ".key", line.bytes()));
  std::ofstream pub(prefix + ".pub", std::ios::trunc);
  pub << keys.public_key << "\n";
  pub.close();
  if (!pub) return Status::IoError("cannot write " + prefix + ".pub");
  return Status::Ok();
}

Result<CurveKeypair> LoadCurveKeypair(const std::string& secret_key_file) {
  S3ORAM_ASSIGN_OR_RETURN(Secret raw, ReadPrivateFile(secret_key_file, 256));
  std::string_view text(reinterpret_cast<const char*>(raw.data()), raw.size());
  text = TrimLine(text);
  if (text.size() != kCurveKeyChars) {
    return Status::InvalidArgument(secret_key_file + " does not hold a CURVE secret key (" +
                                   std::to_string(kCurveKeyChars) + " Z85 characters)");
  }
  std::array<char, kCurveKeyChars + 1> sec{}, pub{};
  std::memcpy(sec.data(), text.data(), kCurveKeyChars);
  const int rc = zmq_curve_public(pub.data(), sec.data());
  CurveKeypair k;
  k.secret_key = Secret::CopyOf(std::string_view(sec.data(), kCurveKeyChars));
  sodium_memzero(sec.data(), sec.size());
  if (rc != 0) return Status::InvalidArgument(secret_key_file + " is not a valid CURVE secret key");
  k.public_key.assign(pub.data(), kCurveKeyChars);
  return k;
}

Result<std::string> ResolvePublicKey(std::string_view key_or_file, const std::string& what) {
  std::string key(TrimLine(key_or_file));
  // Z85 has '/' and '.' in its alphabet, so an inline key is told from a path
  // by being valid Z85 of the right length and not naming a file.
  struct stat st;
  if (CheckZ85Key(key, what).ok() && ::stat(key.c_str(), &st) != 0) return key;
  std::ifstream in(key);
  if (!in) {
    return Status::NotFound(what + ": '" + key +
                            "' is neither a CURVE public key nor a readable .pub file");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string path = key;
  key = std::string(TrimLine(ss.str()));
  S3ORAM_RETURN_IF_ERROR(CheckZ85Key(key, what + " (" + path + ")"));
  return key;
}

}  // namespace s3oram

#include "oramcore/crypto/curve_keys.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "oramcore/base/private_file.h"

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
  if (z85.size() != kCurveKeyChars || z85.find('\0') != std::string_view::npos) {
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

Result<Secret> DecodeSecretKey(const CurveKeypair& keys) {
  if (keys.secret_key.size() != kCurveKeyChars) return Status::InvalidArgument("bad secret key");
  Secret text(kCurveKeyChars + 1);
  std::memcpy(text.data(), keys.secret_key.data(), kCurveKeyChars);
  Secret bin(32);
  if (zmq_z85_decode(bin.data(), reinterpret_cast<const char*>(text.data())) == nullptr) {
    return Status::InvalidArgument("the CURVE secret key is not valid Z85");
  }
  return bin;
}

Result<CurveKeypair> GenerateCurveKeypair() {
  std::array<char, kCurveKeyChars + 1> pub{}, sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0) {
    return Status::FailedPrecondition(
        "this libzmq cannot make CURVE keys (built without libsodium?)");
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
  // Public, but still never through a planted symlink or over another key.
  const std::string pub_path = prefix + ".pub";
  int fd = ::open(pub_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::IoError("cannot create " + pub_path + ": " + std::strerror(errno));
  }
  const std::string text = keys.public_key + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok) return Status::IoError("cannot write " + pub_path);
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
  // A valid inline key is never looked up as a path (Z85 has '/' and '.': a
  // file planted under a key's name must not replace the key).
  if (CheckZ85Key(key, what).ok()) return key;
  const std::string path = key;
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return Status::NotFound(what + ": '" + path +
                            "' is neither a CURVE public key nor a readable .pub file");
  }
  struct stat st;
  char buf[256];
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 022) == 0) {
    n = ::read(fd, buf, sizeof buf);
  }
  ::close(fd);
  if (n < 0) {
    return Status::InvalidArgument(what + ": " + path +
                                   " must be a regular file not writable by group or others");
  }
  key = std::string(TrimLine(std::string_view(buf, static_cast<std::size_t>(n))));
  S3ORAM_RETURN_IF_ERROR(CheckZ85Key(key, what + " (" + path + ")"));
  return key;
}

}  // namespace s3oram

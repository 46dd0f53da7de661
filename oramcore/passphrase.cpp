#include "oramcore/passphrase.h"

#include <fcntl.h>
#include <sodium.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "oramcore/private_file.h"

namespace s3oram {
namespace {

// Drops one trailing "\n" or "\r\n" (files written by editors and echo).
Secret StripNewline(const Secret& s) {
  std::size_t n = s.size();
  if (n > 0 && s.data()[n - 1] == '\n') {
    --n;
    if (n > 0 && s.data()[n - 1] == '\r') --n;
  }
  return Secret::CopyOf(s.bytes().first(n));
}

Status CheckLength(const Secret& s, const std::string& origin) {
  if (s.empty()) return Status::InvalidArgument("the passphrase from " + origin + " is empty");
  if (s.size() > kMaxPassphraseBytes) {
    return Status::InvalidArgument("the passphrase from " + origin + " is longer than " +
                                   std::to_string(kMaxPassphraseBytes) + " bytes");
  }
  return Status::Ok();
}

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// Restores the terminal's settings however the prompt ends.
struct EchoOff {
  int fd;
  termios saved{};
  bool active = false;
  explicit EchoOff(int f) : fd(f) {
    if (::tcgetattr(fd, &saved) != 0) return;
    termios quiet = saved;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    quiet.c_lflag |= ECHONL;
    active = ::tcsetattr(fd, TCSAFLUSH, &quiet) == 0;
  }
  ~EchoOff() {
    if (active) ::tcsetattr(fd, TCSAFLUSH, &saved);
  }
};

void WriteAll(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

Result<Secret> PromptOnce(int tty, std::string_view prompt) {
  WriteAll(tty, prompt);
  Secret line(kMaxPassphraseBytes + 2);
  std::size_t got = 0;
  {
    EchoOff quiet(tty);
    while (got < line.size()) {
      char c;
      ssize_t n = ::read(tty, &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Status::InvalidArgument("no passphrase entered (end of input)");
      if (c == '\n') break;
      line.data()[got++] = static_cast<std::uint8_t>(c);
      c = 0;
    }
  }
  if (got == line.size()) {
    return Status::InvalidArgument("the passphrase is longer than " +
                                   std::to_string(kMaxPassphraseBytes) + " bytes");
  }
  if (got > 0 && line.data()[got - 1] == '\r') --got;
  return Secret::CopyOf(line.bytes().first(got));
}

}  // namespace

Result<Secret> ReadPassphrase(const PassphraseSource& source, std::string_view prompt,
                              bool confirm) {
  if (!source.file.empty()) {
    S3ORAM_ASSIGN_OR_RETURN(Secret raw, ReadPrivateFile(source.file, kMaxPassphraseBytes + 2));
    Secret pass = StripNewline(raw);
    S3ORAM_RETURN_IF_ERROR(CheckLength(pass, source.file));
    return pass;
  }
  if (!source.env.empty()) {
    if (char* value = std::getenv(source.env.c_str()); value != nullptr) {
      const std::size_t len = std::strlen(value);
      Secret pass = Secret::CopyOf(std::string_view(value, len));
      sodium_memzero(value, len);  // the environment block is ours to overwrite
      ::unsetenv(source.env.c_str());
      S3ORAM_RETURN_IF_ERROR(CheckLength(pass, "$" + source.env));
      return pass;
    }
  }
  if (!source.allow_prompt) {
    return Status::FailedPrecondition("no passphrase given: use --passfile FILE or set $" +
                                      (source.env.empty() ? std::string(kPassphraseEnv) : source.env));
  }
  int tty = ::open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (tty < 0) {
    return Status::FailedPrecondition(
        "no passphrase given and no terminal to ask on: use --passfile FILE or set $" +
        (source.env.empty() ? std::string(kPassphraseEnv) : source.env));
  }
  FdCloser closer{tty};
  S3ORAM_ASSIGN_OR_RETURN(Secret pass, PromptOnce(tty, prompt));
  S3ORAM_RETURN_IF_ERROR(CheckLength(pass, "the terminal"));
  if (confirm) {
    S3ORAM_ASSIGN_OR_RETURN(Secret again, PromptOnce(tty, "Repeat the passphrase: "));
    if (!pass.Equals(again)) return Status::InvalidArgument("the two passphrases differ");
  }
  return pass;
}

}  // namespace s3oram

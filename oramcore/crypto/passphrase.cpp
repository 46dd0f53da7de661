#include "oramcore/crypto/passphrase.h"

#include <fcntl.h>
#include <signal.h>
#include <sodium.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <optional>

#include "oramcore/base/private_file.h"

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

volatile std::sig_atomic_t g_prompt_signal = 0;
void OnPromptSignal(int sig) { g_prompt_signal = sig; }
constexpr int kPromptSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU};

// Echo off for the prompt, restored however the prompt ends: signals that
// would stop or end the process are caught while it is off (read(2) then
// returns EINTR), the terminal is restored, and the signal is raised again
// with the caller's handlers back in place (as readpassphrase(3) does).
struct EchoOff {
  int fd;
  termios saved{};
  bool active = false;
  struct sigaction old_actions[std::size(kPromptSignals)];
  explicit EchoOff(int f) : fd(f) {
    g_prompt_signal = 0;
    struct sigaction sa{};
    sa.sa_handler = OnPromptSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: the read must return
    for (std::size_t i = 0; i < std::size(kPromptSignals); ++i) {
      ::sigaction(kPromptSignals[i], &sa, &old_actions[i]);
    }
    if (::tcgetattr(fd, &saved) != 0) return;
    termios quiet = saved;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    quiet.c_lflag |= ECHONL;
    active = ::tcsetattr(fd, TCSAFLUSH, &quiet) == 0;
  }
  ~EchoOff() {
    if (active) ::tcsetattr(fd, TCSAFLUSH, &saved);
    for (std::size_t i = 0; i < std::size(kPromptSignals); ++i) {
      ::sigaction(kPromptSignals[i], &old_actions[i], nullptr);
    }
    if (const int sig = g_prompt_signal; sig != 0) {
      g_prompt_signal = 0;
      ::raise(sig);
    }
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
      if (n < 0 && errno == EINTR && g_prompt_signal == 0) continue;
      if (g_prompt_signal != 0) return Status::InvalidArgument("passphrase entry interrupted");
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

// Takes the passphrase out of the environment (overwritten, then unset)
// whichever source is used, so it does not linger in /proc/PID/environ.
std::optional<Secret> TakeFromEnvironment(const std::string& name) {
  if (name.empty()) return std::nullopt;
  char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  const std::size_t len = std::strlen(value);
  Secret pass = Secret::CopyOf(std::string_view(value, len));
  sodium_memzero(value, len);  // the environment block is ours to overwrite
  ::unsetenv(name.c_str());
  return pass;
}

}  // namespace

Result<Secret> ReadPassphrase(const PassphraseSource& source, std::string_view prompt,
                              bool confirm) {
  std::optional<Secret> from_env = TakeFromEnvironment(source.env);
  if (!source.file.empty()) {
    S3ORAM_ASSIGN_OR_RETURN(Secret raw, ReadPrivateFile(source.file, kMaxPassphraseBytes + 2));
    Secret pass = StripNewline(raw);
    S3ORAM_RETURN_IF_ERROR(CheckLength(pass, source.file));
    return pass;
  }
  if (from_env) {
    S3ORAM_RETURN_IF_ERROR(CheckLength(*from_env, "$" + source.env));
    return std::move(*from_env);
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

#include "fused/control_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>

namespace s3oram::fs {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kAnswerSendDeadline{5000};

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// The directory of `path` (open, O_PATH) and its last component: every
// file operation on the socket goes through them, so a path longer than
// sun_path still works (bind and connect through /proc/self/fd).
struct SocketPlace {
  int dir_fd = -1;
  std::string base;
  sockaddr_un addr{};
  socklen_t addr_len = 0;

  SocketPlace() = default;
  SocketPlace(const SocketPlace&) = delete;
  SocketPlace& operator=(const SocketPlace&) = delete;
  ~SocketPlace() {
    if (dir_fd >= 0) ::close(dir_fd);
  }
};

Status Locate(const std::string& path, SocketPlace& place) {
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  place.base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (place.base.empty()) return Status::InvalidArgument("no file name in " + path);
  place.dir_fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (place.dir_fd < 0) return Status::IoError(Errno("cannot open the directory of " + path));
  std::string name = path;
  if (name.size() >= sizeof place.addr.sun_path) {
    name = "/proc/self/fd/" + std::to_string(place.dir_fd) + "/" + place.base;
    if (name.size() >= sizeof place.addr.sun_path) {
      return Status::InvalidArgument("the control socket's file name is too long: " + path);
    }
  }
  place.addr.sun_family = AF_UNIX;
  std::memcpy(place.addr.sun_path, name.data(), name.size());
  place.addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + 1);
  return Status::Ok();
}

// The uid of the process at the other end of `fd`.
Result<uid_t> PeerUid(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Status::IoError(Errno("SO_PEERCRED"));
  }
  return cred.uid;
}

// Waits for `events` on `fd` until `deadline`; false on timeout or error.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

bool SendAll(int fd, const std::string& bytes, Clock::time_point deadline) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    if (!WaitFor(fd, POLLOUT, deadline)) return false;
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

std::string ControlSocketPath(const std::string& state_path) { return state_path + ".ctl"; }

struct ControlServer::Impl {
  std::string path;
  SocketPlace place;
  Handler handler;
  int listen_fd = -1;
  int stop_fd = -1;
  ino_t inode = 0;  // the socket file this server made (removed only if still it)
  std::thread thread;

  ~Impl() {
    if (thread.joinable()) {
      const std::uint64_t one = 1;
      if (::write(stop_fd, &one, sizeof one) < 0) spdlog::warn("{}", Errno("stopping " + path));
      thread.join();
    }
    if (listen_fd >= 0) ::close(listen_fd);
    if (stop_fd >= 0) ::close(stop_fd);
    struct stat st {};
    if (inode != 0 && ::fstatat(place.dir_fd, place.base.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISSOCK(st.st_mode) && st.st_ino == inode) {
      (void)::unlinkat(place.dir_fd, place.base.c_str(), 0);
    }
  }

  void Serve() {
    for (;;) {
      pollfd fds[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        spdlog::error("{}", Errno("control socket " + path + ": poll"));
        return;
      }
      if (fds[1].revents != 0) return;
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // The listener stays readable: wait a little (or for the stop)
          // instead of spinning on it.
          spdlog::warn("{}", Errno("control socket " + path + ": accept"));
          pollfd stop{stop_fd, POLLIN, 0};
          if (::poll(&stop, 1, 100) > 0) return;
        }
        continue;  // otherwise the peer gave up already, or EINTR
      }
      Answer(fd);
      ::close(fd);
    }
  }

  void Answer(int fd) {
    const auto deadline = Clock::now() + kRequestDeadline;
    auto uid = PeerUid(fd);
    if (!uid.ok() || *uid != ::geteuid()) {
      spdlog::warn("control socket {}: refused a process of uid {}", path,
                   uid.ok() ? std::to_string(*uid) : std::string("?"));
      SendAll(fd,
              "exit 2\nrefused: this mount answers only its own user (uid " +
                  std::to_string(::geteuid()) + ")\n",
              deadline);
      return;
    }
    std::string request;
    char buf[kMaxRequestBytes + 1];
    while (request.find('\n') == std::string::npos) {
      if (request.size() > kMaxRequestBytes || !WaitFor(fd, POLLIN, deadline)) {
        SendAll(fd, "exit 2\nno request line within the limits\n", deadline);
        return;
      }
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return;  // gone before asking
      request.append(buf, static_cast<std::size_t>(n));
    }
    if (request.find('\n') > kMaxRequestBytes) {
      SendAll(fd, "exit 2\nno request line within the limits\n", deadline);
      return;
    }
    request.resize(request.find('\n'));
    ControlAnswer answer;
    try {
      answer = handler(request);
    } catch (const std::exception& e) {
      // The mount must not die of a status: the asker is told instead.
      spdlog::error("control socket {}: answering '{}' failed: {}", path, request, e.what());
      answer = ControlAnswer{2, std::string("the mount could not answer: ") + e.what() + "\n"};
    }
    SendAll(fd, "exit " + std::to_string(answer.exit_code) + "\n" + answer.text,
            Clock::now() + kAnswerSendDeadline);
  }
};

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlServer::~ControlServer() = default;
const std::string& ControlServer::path() const { return impl_->path; }

Result<std::unique_ptr<ControlServer>> ControlServer::Start(const std::string& state_path,
                                                            Handler handler) {
  auto impl = std::make_unique<Impl>();
  impl->path = ControlSocketPath(state_path);
  impl->handler = std::move(handler);
  S3ORAM_RETURN_IF_ERROR(Locate(impl->path, impl->place));
  const SocketPlace& place = impl->place;
  struct stat st {};
  if (::fstatat(place.dir_fd, place.base.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Status::FailedPrecondition(impl->path +
                                        " exists and is not a socket; it is left as it is");
    }
    // A socket left by a daemon of this state that was killed: the caller
    // holds the state's lock, so no other daemon serves it.
    if (::unlinkat(place.dir_fd, place.base.c_str(), 0) != 0) {
      return Status::IoError(Errno("cannot remove the stale " + impl->path));
    }
  }
  impl->listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (impl->listen_fd < 0) return Status::IoError(Errno("socket"));
  // Made private as it is made (the umask), so there is no moment at which
  // the path is a socket others may use; the daemon creates no other file
  // while it starts this.
  const mode_t old_umask = ::umask(077);
  const int bound =
      ::bind(impl->listen_fd, reinterpret_cast<const sockaddr*>(&place.addr), place.addr_len);
  const int bind_errno = errno;
  ::umask(old_umask);
  if (bound != 0) {
    errno = bind_errno;
    return Status::IoError(Errno("cannot bind " + impl->path));
  }
  // 0600 exactly (a socket needs no execute bit), and only on what bind
  // made: a path swapped for a symlink since is refused, not followed.
  if (::fstatat(place.dir_fd, place.base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISSOCK(st.st_mode) || ::fchmodat(place.dir_fd, place.base.c_str(), 0600, 0) != 0) {
    const Status failed = Status::IoError(Errno("cannot make " + impl->path + " private"));
    (void)::unlinkat(place.dir_fd, place.base.c_str(), 0);
    return failed;
  }
  impl->inode = st.st_ino;
  if (::listen(impl->listen_fd, 8) != 0) return Status::IoError(Errno("listen on " + impl->path));
  impl->stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (impl->stop_fd < 0) return Status::IoError(Errno("eventfd"));
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Serve(); });
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

Result<std::optional<ControlAnswer>> AskMountDaemon(const std::string& state_path,
                                                    const std::string& request,
                                                    std::chrono::milliseconds timeout) {
  const std::string path = ControlSocketPath(state_path);
  SocketPlace place;
  if (Status located = Locate(path, place); !located.ok()) {
    // No directory (the state's own error comes later) or an unusable name:
    // no daemon can listen there.
    return std::optional<ControlAnswer>();
  }
  // Non-blocking: a daemon that is frozen, or whose queue is full, makes
  // connect fail at once (EAGAIN) instead of waiting without end.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::IoError(Errno("socket"));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&place.addr), place.addr_len) != 0) {
    if (errno == ENOENT || errno == ECONNREFUSED) return std::optional<ControlAnswer>();
    if (errno == EAGAIN) {
      return Status::Unavailable("the mount's control socket " + path +
                                 " has a full queue (is the daemon hung?)");
    }
    return Status::IoError(Errno("cannot connect to the mount's control socket " + path));
  }
  auto uid = PeerUid(fd);
  if (!uid.ok()) return uid.status();
  if (*uid != ::geteuid()) {
    return Status::PermissionDenied(path + " is served by a process of uid " +
                                    std::to_string(*uid) + ", not this user's: not asked");
  }
  const auto deadline = Clock::now() + timeout;
  if (!SendAll(fd, request + "\n", deadline)) {
    return Status::Unavailable(Errno("cannot send to the mount's control socket " + path));
  }
  std::string reply;
  char buf[4096];
  for (;;) {
    if (!WaitFor(fd, POLLIN, deadline)) {
      return Status::Unavailable("the mount daemon did not answer on " + path + " within " +
                                 std::to_string(timeout.count()) + " ms");
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return Status::IoError(Errno("reading " + path));
    if (n == 0) break;
    reply.append(buf, static_cast<std::size_t>(n));
    if (reply.size() > (std::size_t{16} << 20)) {
      return Status::Corruption("the answer on " + path + " is larger than 16 MiB");
    }
  }
  ControlAnswer answer;
  const std::size_t eol = reply.find('\n');
  const Status garbled = Status::Corruption("the mount daemon's answer on " + path +
                                            " does not begin with an exit line");
  if (eol == std::string::npos || eol <= 5 || reply.compare(0, 5, "exit ") != 0) return garbled;
  int code = -1;
  const char* last = reply.data() + eol;
  if (std::from_chars(reply.data() + 5, last, code).ptr != last || code < 0 || code > 255) {
    return garbled;
  }
  answer.exit_code = code;
  answer.text = reply.substr(eol + 1);
  return std::optional<ControlAnswer>(std::move(answer));
}

}  // namespace s3oram::fs

#include "oramcore/base/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace s3oram {
namespace {

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Status CheckPrivateFile(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::IoError(Errno("cannot stat", path));
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + " is not a regular file");
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return Status::PermissionDenied(path + " is owned by uid " + std::to_string(st.st_uid) +
                                    ", not by the user reading it (uid " +
                                    std::to_string(::geteuid()) + ")");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::PermissionDenied(path + " is accessible by group or others (mode " + mode +
                                    "); secrets must be private: chmod 600 " + path);
  }
  return Status::Ok();
}

Result<Secret> ReadPrivateFile(const std::string& path, std::size_t max_bytes) {
  // O_NONBLOCK: a FIFO must not block the open before it is refused below.
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP) return Status::InvalidArgument(path + " is a symbolic link; give the file itself");
    if (errno == ENOENT) return Status::NotFound(Errno("cannot open", path));
    return Status::IoError(Errno("cannot open", path));
  }
  FdCloser closer{fd};
  S3ORAM_RETURN_IF_ERROR(CheckPrivateFile(fd, path));
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::IoError(Errno("cannot stat", path));
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    return Status::InvalidArgument(path + " is larger than " + std::to_string(max_bytes) +
                                   " bytes; is it the right file?");
  }
  // One byte more than allowed, to notice a file that grew after fstat.
  Secret buf(max_bytes + 1);
  std::size_t got = 0;
  while (got < buf.size()) {
    ssize_t n = ::read(fd, buf.data() + got, buf.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(Errno("cannot read", path));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > max_bytes) {
    return Status::InvalidArgument(path + " is larger than " + std::to_string(max_bytes) + " bytes");
  }
  return Secret::CopyOf(buf.bytes().first(got));
}

Status WritePrivateFile(const std::string& path, std::span<const std::uint8_t> bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return Status::AlreadyExists(path + " already exists; not overwriting it");
    return Status::IoError(Errno("cannot create", path));
  }
  FdCloser closer{fd};
  // The umask cannot widen 0600, but an inherited default ACL could.
  if (::fchmod(fd, 0600) != 0) return Status::IoError(Errno("cannot chmod", path));
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(Errno("cannot write", path));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) return Status::IoError(Errno("cannot sync", path));
  return Status::Ok();
}

}  // namespace s3oram

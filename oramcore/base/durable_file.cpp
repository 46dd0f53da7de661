#include "oramcore/base/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace s3oram {

namespace {

Status SyncOpened(const std::string& path, int flags, const char* kind) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) {
    return Status::IoError(std::string("opening ") + kind + " " + path + ": " +
                           std::strerror(errno));
  }
  int rc;
  while ((rc = ::fsync(fd)) != 0 && errno == EINTR) {
  }
  const int err = errno;
  ::close(fd);
  if (rc == 0) return Status::Ok();
  std::string what = std::string("syncing ") + kind + " " + path + ": " + std::strerror(err);
  // A full disk is its own code (callers report it as ENOSPC; it clears once
  // space is freed).
  if (err == ENOSPC || err == EDQUOT) return Status::NoSpace(std::move(what));
  return Status::IoError(std::move(what));
}

}  // namespace

std::string ParentDir(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

Status SyncFile(const std::string& path) { return SyncOpened(path, O_RDONLY, "file"); }

Status SyncDirectory(const std::string& dir) {
  return SyncOpened(dir, O_RDONLY | O_DIRECTORY, "directory");
}

}  // namespace s3oram

#include "oramcore/protocol/root_copies.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "oramcore/base/private_file.h"

namespace s3oram {

namespace {

Status Errno(const std::string& what, const std::string& path, int err) {
  if (err == ENOSPC || err == EDQUOT) {
    return Status::NoSpace(what + " " + path + ": " + std::strerror(err));
  }
  return Status::IoError(what + " " + path + ": " + std::strerror(err));
}

}  // namespace

Result<std::unique_ptr<RootCopies>> RootCopies::Open(const std::string& path, std::size_t entries,
                                                     std::size_t elems_per_entry) {
  if (entries == 0 || elems_per_entry == 0) {
    return Status::InvalidArgument("root copies need at least one entry of one element");
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Errno("opening", path, errno);
  std::unique_ptr<RootCopies> c(new RootCopies());
  c->fd_ = fd;
  c->path_ = path;
  c->entries_ = entries;
  c->elems_ = elems_per_entry;
  // Sealed blocks only, but it sits beside the state: held to the same rule.
  S3ORAM_RETURN_IF_ERROR(CheckPrivateFile(fd, path));
  const auto want = static_cast<off_t>(entries * elems_per_entry * sizeof(field::Elem));
  struct stat st{};
  if (::fstat(fd, &st) != 0) return Errno("stat of", path, errno);
  if (st.st_size != want) {
    // Another shape (or a fresh file): start empty, sparse.
    if (::ftruncate(fd, 0) != 0 || ::ftruncate(fd, want) != 0) return Errno("sizing", path, errno);
  }
  return c;
}

RootCopies::~RootCopies() {
  if (fd_ >= 0) ::close(fd_);
}

Status RootCopies::Put(std::size_t index, std::span<const field::Elem> elems) {
  if (index >= entries_ || elems.size() != elems_) {
    return Status::InvalidArgument("root copy " + std::to_string(index) + " of " +
                                   std::to_string(elems.size()) + " elements out of range");
  }
  const auto* p = reinterpret_cast<const std::uint8_t*>(elems.data());
  std::size_t left = elems.size_bytes();
  auto off = static_cast<off_t>(index * elems_ * sizeof(field::Elem));
  while (left > 0) {
    const ssize_t n = ::pwrite(fd_, p, left, off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("writing", path_, errno);
    }
    p += n;
    off += n;
    left -= static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

std::optional<std::vector<field::Elem>> RootCopies::Get(std::size_t index) const {
  if (index >= entries_) return std::nullopt;
  std::vector<field::Elem> out(elems_);
  auto* p = reinterpret_cast<std::uint8_t*>(out.data());
  std::size_t left = out.size() * sizeof(field::Elem);
  auto off = static_cast<off_t>(index * elems_ * sizeof(field::Elem));
  while (left > 0) {
    const ssize_t n = ::pread(fd_, p, left, off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    p += n;
    off += n;
    left -= static_cast<std::size_t>(n);
  }
  for (field::Elem e : out) {
    if (e >= field::kPrime) return std::nullopt;
  }
  return out;
}

}  // namespace s3oram

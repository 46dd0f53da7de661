#include "serverd/lease_file.h"

#include <fcntl.h>
#include <sodium.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

namespace s3oram::serverd {

namespace {

constexpr char kMagic[8] = {'S', '3', 'L', 'E', 'A', 'S', 'E', '1'};
constexpr std::size_t kSumBytes = 16;

Status Sys(const std::string& what, const std::string& path, int e) {
  return Status::IoError(what + " " + path + ": " +
                         std::error_code(e, std::generic_category()).message());
}

void PutLe(std::vector<std::uint8_t>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
std::uint64_t GetLe(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}

std::array<std::uint8_t, kSumBytes> Sum(const std::uint8_t* p, std::size_t n) {
  std::array<std::uint8_t, kSumBytes> out{};
  crypto_generichash(out.data(), out.size(), p, n, nullptr, 0);
  return out;
}

Status WriteAll(int fd, const std::vector<std::uint8_t>& bytes, const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t r = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Sys("writing", path, errno);
    }
    done += static_cast<std::size_t>(r);
  }
  return Status::Ok();
}

}  // namespace

Result<LeaseRecord> LoadLease(const std::string& dir) {
  const std::string path = dir + "/lease";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return LeaseRecord{};
    return Sys("opening", path, errno);
  }
  std::vector<std::uint8_t> bytes;
  std::uint8_t buf[4096];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return Sys("reading", path, e);
    }
    if (r == 0) break;
    bytes.insert(bytes.end(), buf, buf + r);
    if (bytes.size() > kMaxLeaseHolderBytes + 64) break;
  }
  ::close(fd);
  constexpr std::size_t kFixed = 8 + 8 + 8 + 8 + 4;
  auto bad = [&path](const std::string& why) {
    return Status::Corruption("lease record " + path + " is damaged (" + why +
                              "); remove it only if no client holds the filesystem");
  };
  if (bytes.size() < kFixed + kSumBytes) return bad("too short");
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) return bad("bad magic");
  const std::uint64_t len = GetLe(bytes.data() + 32, 4);
  if (len > kMaxLeaseHolderBytes || bytes.size() != kFixed + len + kSumBytes) {
    return bad("bad length");
  }
  auto sum = Sum(bytes.data(), kFixed + len);
  if (sodium_memcmp(sum.data(), bytes.data() + kFixed + len, kSumBytes) != 0) {
    return bad("checksum mismatch");
  }
  LeaseRecord rec;
  rec.holder_epoch = GetLe(bytes.data() + 8, 8);
  rec.highest_epoch = GetLe(bytes.data() + 16, 8);
  rec.acquired_unix_ms = GetLe(bytes.data() + 24, 8);
  rec.holder.assign(reinterpret_cast<const char*>(bytes.data() + kFixed), len);
  return rec;
}

Status SaveLease(const std::string& dir, const LeaseRecord& record, bool sync) {
  if (record.holder.size() > kMaxLeaseHolderBytes) {
    return Status::InvalidArgument("lease holder description too long");
  }
  std::vector<std::uint8_t> bytes(kMagic, kMagic + 8);
  PutLe(bytes, record.holder_epoch, 8);
  PutLe(bytes, record.highest_epoch, 8);
  PutLe(bytes, record.acquired_unix_ms, 8);
  PutLe(bytes, record.holder.size(), 4);
  bytes.insert(bytes.end(), record.holder.begin(), record.holder.end());
  auto sum = Sum(bytes.data(), bytes.size());
  bytes.insert(bytes.end(), sum.begin(), sum.end());

  const std::string tmp = dir + "/lease.tmp", path = dir + "/lease";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Sys("creating", tmp, errno);
  Status st = WriteAll(fd, bytes, tmp);
  if (st.ok() && sync && ::fdatasync(fd) != 0) st = Sys("fdatasync of", tmp, errno);
  ::close(fd);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Sys("renaming", tmp, errno);
  if (sync) {
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return Sys("opening directory", dir, errno);
    int rc = ::fsync(dfd);
    int e = errno;
    ::close(dfd);
    if (rc != 0) return Sys("fsync of directory", dir, e);
  }
  return Status::Ok();
}

}  // namespace s3oram::serverd

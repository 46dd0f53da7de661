// InodeLocks: the per-file locks shared by FileData and BlockCache.
//
// A file's lock is held while its block mappings are read or changed and
// its cached pages are loaded, changed, written back or dropped. So a block
// mapping (in particular its valid length) read under the lock stays true
// until the lock is released: nobody else can write the page back (which
// raises valid) and drop it meanwhile. Striped: inodes share a mutex when
// equal modulo the stripe count, which only costs some parallelism. A
// thread holds at most one stripe, and the cache only ever try-locks, so
// there is no lock-order cycle.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

namespace s3oram::fs {

class InodeLocks {
 public:
  std::mutex& For(std::uint64_t ino) { return stripes_[ino % stripes_.size()]; }

 private:
  std::array<std::mutex, 64> stripes_;
};

}  // namespace s3oram::fs

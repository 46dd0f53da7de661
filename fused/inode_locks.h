// InodeLocks: the per-file locks shared by FileData and BlockCache.
//
// A file's lock is held while its block mappings are read or changed and
// its cached pages are loaded, changed, written back or dropped. So a block
// mapping (in particular its valid length) read under the lock stays true
// until the lock is released: nobody else can write the page back (which
// raises valid) and drop it meanwhile. Striped: inodes share a mutex when
// equal modulo the stripe count, which only costs some parallelism. A
// thread blocks on at most one stripe and holds no other while it waits; the
// cache only try-locks further stripes (for pages written back together
// with the one it was asked for), so there is no lock-order cycle.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

namespace s3oram::fs {

class InodeLocks {
 public:
  std::mutex& For(std::uint64_t ino) { return stripes_[StripeOf(ino)]; }
  std::size_t StripeOf(std::uint64_t ino) const { return ino % stripes_.size(); }
  std::mutex& Stripe(std::size_t i) { return stripes_[i]; }

 private:
  std::array<std::mutex, 64> stripes_;
};

}  // namespace s3oram::fs

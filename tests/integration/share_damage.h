// Damage to one server's share files, as a failing disk would leave it, for
// the server-fault suites (server_fault_test.cpp below the filesystem,
// fs_server_fault_test.cpp through a mount). The server must be stopped
// while its files are changed. Layout: serverd/share_store.h (a 4 KiB
// header region with two copies of the meta record, buckets 1.. bucket-major
// and slot-major, then one 8-byte digest per slot from the next 4 KiB
// boundary).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "oramcore/tree/geometry.h"
#include "oramcore/tree/params.h"

namespace s3oram::testing {

inline constexpr std::uint64_t kShareHeaderRegion = 4096;

enum class ShareDamage { kDataSlot, kUnusedRootSlot, kDigest, kHeaderCopy };

// XORs `n` random nonzero bytes into `path` at `offset`.
inline void FlipBytes(const std::string& path, std::uint64_t offset, std::size_t n,
                      std::mt19937_64& rng) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  std::vector<char> b(n);
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(b.data(), static_cast<std::streamsize>(n));
  ASSERT_EQ(f.gcount(), static_cast<std::streamsize>(n)) << path << " at " << offset;
  for (char& c : b) c = static_cast<char>(c ^ static_cast<char>(1 + rng() % 255));
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(b.data(), static_cast<std::streamsize>(n));
  ASSERT_TRUE(f.good());
}

// Damages `shares` (a stopped server's shares.bin) as `kind` says, at a
// place drawn from `rng`; returns where, for the test's output.
inline std::string DamageShareFile(const std::string& shares, const OramParams& p, ShareDamage kind,
                                   std::mt19937_64& rng) {
  const TreeGeometry geo = p.geometry();
  const std::uint64_t slot_bytes = p.slot_bytes();
  switch (kind) {
    case ShareDamage::kDataSlot: {
      // A slot of a bucket that holds data (the root, or a bucket an
      // eviction wrote), somewhere inside the slot.
      std::vector<std::uint64_t> written = {1};
      std::ifstream f(shares, std::ios::binary);
      std::vector<char> x(slot_bytes * p.bucket_size);
      for (std::uint64_t b = 2; b <= geo.num_buckets(); ++b) {
        f.seekg(static_cast<std::streamoff>(kShareHeaderRegion + (b - 1) * x.size()));
        f.read(x.data(), static_cast<std::streamsize>(x.size()));
        for (char ch : x) {
          if (ch != 0) {
            written.push_back(b);
            break;
          }
        }
      }
      const std::uint64_t b = written[rng() % written.size()];
      const std::uint64_t slot = rng() % p.bucket_size;
      FlipBytes(shares,
                kShareHeaderRegion + ((b - 1) * p.bucket_size + slot) * slot_bytes +
                    rng() % (slot_bytes - 16),
                16, rng);
      return "bucket " + std::to_string(b) + " slot " + std::to_string(slot);
    }
    case ShareDamage::kUnusedRootSlot: {
      const std::uint64_t slot = p.evict_rate + rng() % (p.bucket_size - p.evict_rate);
      FlipBytes(shares, kShareHeaderRegion + slot * slot_bytes + rng() % (slot_bytes - 16), 16,
                rng);
      return "root slot " + std::to_string(slot);
    }
    case ShareDamage::kDigest: {
      const std::uint64_t data_end =
          kShareHeaderRegion + geo.num_buckets() * p.bucket_size * slot_bytes;
      const std::uint64_t digests =
          (data_end + kShareHeaderRegion - 1) / kShareHeaderRegion * kShareHeaderRegion;
      const std::uint64_t slot = rng() % p.evict_rate;  // a root slot that was written
      FlipBytes(shares, digests + slot * 8, 8, rng);
      return "the digest of root slot " + std::to_string(slot);
    }
    case ShareDamage::kHeaderCopy: {
      const std::uint64_t copy = rng() % 2;
      FlipBytes(shares, copy * 512 + 16 + rng() % 90, 4, rng);
      return "meta record copy " + std::to_string(copy);
    }
  }
  return "?";
}

// The servers other than `bad` that `text` calls damaged, lying or odd.
inline std::vector<std::size_t> OtherServersNamed(const std::string& text, std::size_t bad) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < 3; ++i) {
    if (i == bad) continue;
    for (const char* what :
         {" has damaged storage", ": the prepared eviction", ": DAMAGED", " holds the odd share"}) {
      if (text.find("server " + std::to_string(i) + what) != std::string::npos) out.push_back(i);
    }
  }
  return out;
}

}  // namespace s3oram::testing

// Damage to one server's share files, as a failing disk would leave it, for
// the server-fault suites (server_fault_test.cpp below the filesystem,
// fs_server_fault_test.cpp through a mount). The server must be stopped
// while its files are changed: where a bucket and its digests lie is asked
// of its store (serverd/share_store.h: buckets move between places as
// evictions commit), opened while the server is down. The meta record copies
// are at 0 and 512.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/math/slot_digest.h"
#include "oramcore/tree/geometry.h"
#include "oramcore/tree/params.h"
#include "serverd/share_store.h"

namespace s3oram::testing {

// kDigest damages one written root slot's digest, which the next access may
// heal: an access writes its root slot (with a new digest) before the
// retrieval reads the root. kTwoRootDigests damages two, so the first
// retrieval after the damage always meets one of them.
enum class ShareDamage { kDataSlot, kUnusedRootSlot, kDigest, kTwoRootDigests, kHeaderCopy };

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

// Where bucket b's data and digests lie in `shares` (a stopped server's
// shares.bin), and those of each bucket of its shadow (none if it has none).
inline serverd::StoreInspection::FileRange BucketInFile(const std::string& shares,
                                                        std::uint64_t b) {
  auto at = serverd::StoreInspection::InspectFile(shares);
  EXPECT_TRUE(at.ok()) << at.status().ToString();
  return at.ok() && b < at->size() ? (*at)[b] : serverd::StoreInspection::FileRange{};
}
inline std::vector<serverd::StoreInspection::FileRange> ShadowInFile(const std::string& shares) {
  auto store = serverd::ShareStore::Open(shares.substr(0, shares.rfind('/')));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? (*store)->inspection().ShadowInFile()
                    : std::vector<serverd::StoreInspection::FileRange>{};
}

// Damages `shares` (a stopped server's shares.bin) as `kind` says, at a
// place drawn from `rng`; returns where, for the test's output.
inline std::string DamageShareFile(const std::string& shares, const OramParams& p, ShareDamage kind,
                                   std::mt19937_64& rng) {
  const TreeGeometry geo = p.geometry();
  const std::uint64_t slot_bytes = p.slot_bytes();
  // Where the buckets lie now (they move between places as evictions commit).
  std::vector<serverd::StoreInspection::FileRange> at;
  std::vector<std::uint64_t> written = {1};
  if (kind != ShareDamage::kHeaderCopy) {
    auto inspected = serverd::StoreInspection::InspectFile(shares);
    EXPECT_TRUE(inspected.ok()) << inspected.status().ToString();
    if (!inspected.ok()) return "?";
    at = std::move(*inspected);
    std::ifstream f(shares, std::ios::binary);
    std::vector<char> x(slot_bytes * p.bucket_size);
    for (std::uint64_t b = 2; kind == ShareDamage::kDataSlot && b <= geo.num_buckets(); ++b) {
      f.seekg(static_cast<std::streamoff>(at[b].data));
      f.read(x.data(), static_cast<std::streamsize>(x.size()));
      for (char ch : x) {
        if (ch != 0) {
          written.push_back(b);
          break;
        }
      }
    }
  }
  switch (kind) {
    case ShareDamage::kDataSlot: {
      // A slot of a bucket that holds data (the root, or a bucket an
      // eviction wrote), somewhere inside the slot.
      const std::uint64_t b = written[rng() % written.size()];
      const std::uint64_t slot = rng() % p.bucket_size;
      FlipBytes(shares, at[b].data + slot * slot_bytes + rng() % (slot_bytes - 16), 16, rng);
      return "bucket " + std::to_string(b) + " slot " + std::to_string(slot);
    }
    case ShareDamage::kUnusedRootSlot: {
      const std::uint64_t slot = p.evict_rate + rng() % (p.bucket_size - p.evict_rate);
      FlipBytes(shares, at[1].data + slot * slot_bytes + rng() % (slot_bytes - 16), 16, rng);
      return "root slot " + std::to_string(slot);
    }
    case ShareDamage::kDigest: {
      const std::uint64_t slot = rng() % p.evict_rate;  // a root slot that was written
      FlipBytes(shares, at[1].digests + slot * 8, 8, rng);
      return "the digest of root slot " + std::to_string(slot);
    }
    case ShareDamage::kTwoRootDigests: {
      const std::uint64_t first = rng() % p.evict_rate;
      const std::uint64_t second = (first + 1 + rng() % (p.evict_rate - 1)) % p.evict_rate;
      FlipBytes(shares, at[1].digests + first * 8, 8, rng);
      FlipBytes(shares, at[1].digests + second * 8, 8, rng);
      return "the digests of root slots " + std::to_string(first) + " and " +
             std::to_string(second);
    }
    case ShareDamage::kHeaderCopy: {
      const std::uint64_t copy = rng() % 2;
      FlipBytes(shares, copy * 512 + 16 + rng() % 90, 4, rng);
      return "meta record copy " + std::to_string(copy);
    }
  }
  return "?";
}

// The digest key's seed in a share file's meta record (serverd/share_store.h).
inline constexpr std::uint64_t kDigestSeedOffset = 80;

// Adds a nonzero value to one element of the share of (bucket, slot) in
// `shares` (a stopped server's shares.bin) and writes the slot's digest to
// match: what a memory fault before the digest, or a server rewriting its
// own file, leaves. No digest check can see it; only the other servers'
// shares can. `seed` picks the element and the value.
inline void RewriteSlotWithItsDigest(const std::string& shares, const OramParams& p,
                                     std::uint64_t bucket, std::uint32_t slot, std::uint64_t seed) {
  std::fstream f(shares, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << shares;
  digest::Seed key_seed{};
  f.seekg(static_cast<std::streamoff>(kDigestSeedOffset));
  f.read(reinterpret_cast<char*>(key_seed.data()), key_seed.size());
  const std::size_t m = p.elems_per_slot();
  // Where the bucket and its digests lie now (buckets move as evictions commit).
  auto at = serverd::StoreInspection::InspectFile(shares);
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  ASSERT_LT(bucket, at->size());
  const auto data_at =
      static_cast<std::streamoff>((*at)[bucket].data + slot * m * sizeof(field::Elem));
  std::vector<field::Elem> x(m);
  f.seekg(data_at);
  f.read(reinterpret_cast<char*>(x.data()), static_cast<std::streamsize>(m * sizeof(field::Elem)));
  x[seed % m] = field::Add(x[seed % m], 1 + static_cast<field::Elem>(seed % 1000));
  digest::SlotDigest d{};
  ASSERT_TRUE(digest::DigestKey(key_seed, m).Digest(x, &d));
  f.seekp(data_at);
  f.write(reinterpret_cast<const char*>(x.data()),
          static_cast<std::streamsize>(m * sizeof(field::Elem)));
  f.seekp(static_cast<std::streamoff>((*at)[bucket].digests + slot * sizeof(d)));
  f.write(reinterpret_cast<const char*>(d.data()), sizeof(d));
  ASSERT_TRUE(f.good());
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

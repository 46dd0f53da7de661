// BackupStore (serverd/backup_store.h): chunked uploads, the two generations
// kept, crash safety of an interrupted upload, idempotent resends, restarts.
#include "serverd/backup_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tests/support/test_seed.h"

namespace s3oram::serverd {
namespace {

using field::Elem;
using testing::TempDir;

std::vector<Elem> RandomElems(std::mt19937_64& rng, std::size_t n) {
  std::vector<Elem> v(n);
  for (auto& e : v) e = static_cast<Elem>(rng() % field::kPrime);
  return v;
}

// Uploads `data` as `generation` in chunks of `chunk` elements.
void Upload(BackupStore& s, std::uint64_t generation, const std::vector<Elem>& data,
            std::size_t chunk, std::uint64_t key_epoch = 0) {
  for (std::size_t off = 0; off < data.size(); off += chunk) {
    const std::size_t n = std::min(chunk, data.size() - off);
    auto r = s.Put(generation, off, data.size(), off + n == data.size(),
                   std::span(data).subspan(off, n), key_epoch);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, off + n);
  }
}

std::vector<Elem> ReadAll(const BackupStore& s, std::uint64_t generation, std::uint32_t chunk) {
  std::vector<Elem> out;
  std::uint64_t total = 1;
  while (out.size() < total) {
    auto r = s.Get(generation, out.size(), chunk, &total);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    out.insert(out.end(), r->begin(), r->end());
  }
  return out;
}

std::vector<std::uint64_t> Generations(const BackupStore& s) {
  std::vector<std::uint64_t> g;
  for (const auto& b : s.List()) g.push_back(b.generation);
  return g;
}

TEST(BackupStoreTest, RoundTripKeepsTwoNewestGenerations) {
  std::mt19937_64 rng = s3oram::testing::SeededRng();
  TempDir dir;
  auto s = BackupStore::Open(dir.path(), /*sync=*/true);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<std::vector<Elem>> data;
  for (std::uint64_t g = 1; g <= 4; ++g) {
    data.push_back(RandomElems(rng, 1000 + g * 7));
    Upload(**s, g, data.back(), 333);
  }
  EXPECT_EQ(Generations(**s), (std::vector<std::uint64_t>{3, 4}));
  EXPECT_EQ(ReadAll(**s, 3, 100), data[2]);
  EXPECT_EQ(ReadAll(**s, 4, 4096), data[3]);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/backup-1.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/backup-2.bin"));
  EXPECT_EQ(s.value()->Get(2, 0, 1, nullptr).status().code(), Status::Code::kNotFound);

  // A restarted server finds the same generations.
  s->reset();
  auto again = BackupStore::Open(dir.path());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(Generations(**again), (std::vector<std::uint64_t>{3, 4}));
  EXPECT_EQ(ReadAll(**again, 4, 50), data[3]);
}

// A passphrase change raises the key epoch: the first complete generation of
// the new epoch removes every older one (even within the two kept), and an
// upload under the old epoch is refused. A crash between the new
// generation's rename and that removal is finished at the next open.
TEST(BackupStoreTest, ANewKeyEpochRemovesEveryGenerationOfTheOldOne) {
  std::mt19937_64 rng = s3oram::testing::SeededRng();
  TempDir dir;
  auto s = BackupStore::Open(dir.path(), /*sync=*/true);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::vector<Elem> data = RandomElems(rng, 5000);
  Upload(**s, 1, data, 4096, /*key_epoch=*/0);
  Upload(**s, 2, data, 4096, 0);
  EXPECT_EQ(Generations(**s), (std::vector<std::uint64_t>{1, 2}));
  // An interrupted upload of the new epoch revokes nothing yet.
  ASSERT_TRUE(s.value()->Put(3, 0, data.size(), false, std::span(data).first(100), 1).ok());
  EXPECT_EQ(Generations(**s), (std::vector<std::uint64_t>{1, 2}));
  Upload(**s, 3, data, 4096, 1);
  ASSERT_EQ(s.value()->List().size(), 1u);
  EXPECT_EQ(s.value()->List()[0], (wire::BackupInfo{3, data.size(), 1}));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/backup-1.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/backup-2.bin"));
  EXPECT_EQ(s.value()->Get(2, 0, 1, nullptr).status().code(), Status::Code::kNotFound);
  // A device still on the old passphrase cannot put an old-epoch backup back.
  auto stale = s.value()->Put(4, 0, 1, true, std::span(data).first(1), 0);
  ASSERT_EQ(stale.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(stale.status().message().find("passphrase was changed"), std::string::npos)
      << stale.status().ToString();
  EXPECT_EQ(Generations(**s), (std::vector<std::uint64_t>{3}));
  Upload(**s, 4, data, 4096, 1);
  EXPECT_EQ(Generations(**s), (std::vector<std::uint64_t>{3, 4}));
  // The epoch survives a restart: still refused, still listed.
  s->reset();
  auto again = BackupStore::Open(dir.path());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again.value()->List()[1], (wire::BackupInfo{4, data.size(), 1}));
  EXPECT_EQ(again.value()->Put(5, 0, 1, true, std::span(data).first(1), 0).status().code(),
            Status::Code::kFailedPrecondition);

  // The crash case: an old-epoch file beside a newer epoch's, as a kill
  // between the rename and the removal leaves them. Open removes it.
  TempDir other;
  {
    auto o = BackupStore::Open(other.path());
    ASSERT_TRUE(o.ok());
    Upload(**o, 1, data, 4096, 0);
  }
  again->reset();
  std::filesystem::copy_file(other.path() + "/backup-1.bin", dir.path() + "/backup-1.bin");
  auto reopened = BackupStore::Open(dir.path());
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ(Generations(**reopened), (std::vector<std::uint64_t>{3, 4}));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/backup-1.bin"));
}

TEST(BackupStoreTest, InterruptedUploadLeavesThePreviousGenerationIntact) {
  std::mt19937_64 rng = s3oram::testing::SeededRng();
  TempDir dir;
  auto s = BackupStore::Open(dir.path());
  ASSERT_TRUE(s.ok());
  const auto first = RandomElems(rng, 500);
  Upload(**s, 1, first, 128);
  // Generation 2: two chunks of four, never the last.
  const auto second = RandomElems(rng, 500);
  for (std::size_t off = 0; off < 256; off += 128) {
    ASSERT_TRUE(s.value()->Put(2, off, second.size(), false,
                               std::span(second).subspan(off, 128), 0).ok());
  }
  EXPECT_EQ(Generations(**s), (std::vector<std::uint64_t>{1}));
  EXPECT_EQ(ReadAll(**s, 1, 64), first);
  EXPECT_EQ(s.value()->Get(2, 0, 1, nullptr).status().code(), Status::Code::kNotFound);
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/backup-upload.tmp"));

  // The server restarts (or the client vanished): the partial upload is gone,
  // generation 1 is still listed and whole, and the upload cannot be resumed.
  s->reset();
  auto again = BackupStore::Open(dir.path());
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/backup-upload.tmp"));
  EXPECT_EQ(Generations(**again), (std::vector<std::uint64_t>{1}));
  EXPECT_EQ(ReadAll(**again, 1, 1000), first);
  auto resume =
      again.value()->Put(2, 256, second.size(), false, std::span(second).subspan(256, 128), 0);
  EXPECT_EQ(resume.status().code(), Status::Code::kFailedPrecondition);
  // Starting over works.
  Upload(**again, 2, second, 200);
  EXPECT_EQ(Generations(**again), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(ReadAll(**again, 2, 77), second);
}

TEST(BackupStoreTest, ResentChunksAreIdempotentAndOrderIsEnforced) {
  std::mt19937_64 rng = s3oram::testing::SeededRng();
  TempDir dir;
  auto s = BackupStore::Open(dir.path(), false);
  ASSERT_TRUE(s.ok());
  const auto data = RandomElems(rng, 300);
  BackupStore& b = **s;
  ASSERT_TRUE(b.Put(5, 0, 300, false, std::span(data).first(100), 0).ok());
  ASSERT_TRUE(b.Put(5, 100, 300, false, std::span(data).subspan(100, 100), 0).ok());
  // The same chunk again (a transport resend): accepted, nothing changes.
  auto dup = b.Put(5, 100, 300, false, std::span(data).subspan(100, 100), 0);
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(*dup, 200u);
  // A gap is refused.
  EXPECT_EQ(b.Put(5, 250, 300, true, std::span(data).subspan(250, 50), 0).status().code(),
            Status::Code::kFailedPrecondition);
  ASSERT_TRUE(b.Put(5, 200, 300, true, std::span(data).subspan(200, 100), 0).ok());
  // The last chunk resent after completion: still success.
  auto last = b.Put(5, 200, 300, true, std::span(data).subspan(200, 100), 0);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(ReadAll(b, 5, 1000), data);
  // Older generations are refused once a newer one is stored.
  EXPECT_EQ(b.Put(4, 0, 1, true, std::span(data).first(1), 0).status().code(),
            Status::Code::kInvalidArgument);
}

TEST(BackupStoreTest, DamagedFilesAreNotServedAsShares) {
  TempDir dir;
  {
    auto s = BackupStore::Open(dir.path(), false);
    ASSERT_TRUE(s.ok());
    const std::vector<Elem> data(64, 9);
    Upload(**s, 1, data, 64);
    Upload(**s, 2, data, 64);
  }
  // Generation 1 truncated (ignored at open), generation 2 with a bad element.
  std::filesystem::resize_file(dir.path() + "/backup-1.bin", 32 + 10 * 4);
  {
    std::fstream f(dir.path() + "/backup-2.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(32 + 4 * 3);
    const char bad[4] = {'\xff', '\xff', '\xff', '\xff'};
    f.write(bad, 4);
  }
  auto s = BackupStore::Open(dir.path(), false);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Generations(**s), (std::vector<std::uint64_t>{2}));
  std::uint64_t total = 0;
  auto r = s.value()->Get(2, 0, 64, &total);
  EXPECT_EQ(r.status().code(), Status::Code::kDamaged) << r.status().ToString();
  // RemoveAll (a new filesystem) clears everything it serves.
  ASSERT_TRUE(s.value()->RemoveAll().ok());
  EXPECT_TRUE(s.value()->List().empty());
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/backup-2.bin"));
}

// Record digests: a generation spanning several 4096-element records,
// uploaded in chunks that straddle record boundaries, reads back whole; a byte
// changed on disk inside one record makes exactly the reads touching that
// record fail as Damaged, naming the record's elements.
TEST(BackupStoreTest, ChangedBytesOnDiskAreFoundByTheirRecordDigest) {
  std::mt19937_64 rng = s3oram::testing::SeededRng();
  TempDir dir;
  const auto data = RandomElems(rng, 10000);  // records [0,4096) [4096,8192) [8192,10000)
  {
    auto s = BackupStore::Open(dir.path(), false);
    ASSERT_TRUE(s.ok());
    Upload(**s, 3, data, 1000);
    EXPECT_EQ(ReadAll(**s, 3, 777), data);
  }
  const std::string path = dir.path() + "/backup-3.bin";
  EXPECT_EQ(std::filesystem::file_size(path), 32u + 10000 * 4 + 3 * 16);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(32 + 5000 * 4 + 1);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);  // the element stays below p more often than not
    f.seekp(32 + 5000 * 4 + 1);
    f.write(&c, 1);
  }
  auto s = BackupStore::Open(dir.path(), false);
  ASSERT_TRUE(s.ok());
  std::uint64_t total = 0;
  auto before = s.value()->Get(3, 0, 4096, &total);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_TRUE(std::equal(before->begin(), before->end(), data.begin()));
  auto after = s.value()->Get(3, 8192, 1808, &total);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_TRUE(std::equal(after->begin(), after->end(), data.begin() + 8192));
  for (std::uint64_t offset : {std::uint64_t{4000}, std::uint64_t{4096}, std::uint64_t{5000},
                               std::uint64_t{8191}}) {
    auto r = s.value()->Get(3, offset, 200, &total);
    ASSERT_FALSE(r.ok()) << "offset " << offset;
    EXPECT_EQ(r.status().code(), Status::Code::kDamaged) << r.status().ToString();
    EXPECT_NE(r.status().message().find("elements [4096, 8192)"), std::string::npos)
        << r.status().message();
  }
}

// A generation written before record digests (format 1) is still served.
TEST(BackupStoreTest, Format1GenerationsAreServedUnchecked) {
  TempDir dir;
  std::vector<Elem> data(100);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<Elem>(i * 31 + 7);
  {
    std::ofstream f(dir.path() + "/backup-4.bin", std::ios::binary);
    const std::uint32_t magic = 0x4b423353, version = 1;
    const std::uint64_t generation = 4, elems = data.size(), reserved = 0;
    f.write(reinterpret_cast<const char*>(&magic), 4);
    f.write(reinterpret_cast<const char*>(&version), 4);
    f.write(reinterpret_cast<const char*>(&generation), 8);
    f.write(reinterpret_cast<const char*>(&elems), 8);
    f.write(reinterpret_cast<const char*>(&reserved), 8);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
  }
  auto s = BackupStore::Open(dir.path(), false);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Generations(**s), (std::vector<std::uint64_t>{4}));
  EXPECT_EQ(ReadAll(**s, 4, 33), data);
}

}  // namespace
}  // namespace s3oram::serverd

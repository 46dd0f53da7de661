// FileData over a real MetadataStore (an SQLite file in a private temporary
// directory) and an in-memory BlockEngine: the cache stays within its
// capacity however much is read or written, evicted dirty data are not
// lost, reused blocks never show a previous owner's bytes (also after a
// simulated daemon crash), shrink-then-grow reads zeros, orphans are freed
// only while still forgotten, and concurrent files agree with a model.
// (End-to-end, FileData runs over the real ORAM in the fs_* tests.)
#include "fused/file_data.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/bare_state.h"
#include "tests/support/memory_block_engine.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_seed.h"

namespace s3oram::fs {
namespace {

using Bytes = std::vector<std::uint8_t>;

constexpr std::uint32_t kB = 4096;
constexpr std::uint64_t kCapacityBlocks = 256;
constexpr std::size_t kCachePages = 4;

Bytes Pattern(std::size_t n, std::uint64_t seed) {
  Bytes b(n);
  std::mt19937_64 rng(seed);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  return b;
}

// One "daemon": the metadata connection, the cache and FileData. A test can
// drop it (a crash: dirty pages vanish unwritten) and start another over the
// same state file and engine.
struct Daemon {
  Daemon(const std::string& state, s3oram::testing::MemoryBlockEngine& engine,
         std::uint32_t readahead) {
    auto r = MetadataStore::Open(s3oram::testing::TestState(state), kCapacityBlocks, kB);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    meta = std::move(r).value();
    cache = std::make_unique<BlockCache>(
        engine, locks, kCachePages,
        [this](const std::vector<WrittenExtent>& w) { return meta->MarkWritten(w); });
    data = std::make_unique<FileData>(*meta, *cache, engine, locks, std::chrono::milliseconds(0),
                                      readahead);
    data->StartBackground();
  }
  std::unique_ptr<MetadataStore> meta;
  InodeLocks locks;
  std::unique_ptr<BlockCache> cache;
  std::unique_ptr<FileData> data;
};

class FileDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = dir_.Sub("state.db");
    s3oram::testing::CreateBareStateFile(state_);
    Start();
  }
  void TearDown() override { d_.reset(); }
  void Start() { d_ = std::make_unique<Daemon>(state_, engine_, readahead_); }
  void Crash() { d_.reset(); }  // no flush: dirty pages are lost

  Ino MakeFile(const std::string& name) {
    Attr a;
    EXPECT_EQ(d_->meta->Create(kRootIno, name, S_IFREG | 0644, 0, 0, 0, &a), 0) << name;
    return a.ino;
  }
  Bytes ReadAll(Ino ino, std::uint64_t offset, std::size_t size) {
    Bytes out;
    EXPECT_EQ(d_->data->Read(ino, offset, size, &out), 0);
    return out;
  }
  void ExpectCacheWithinCapacity() {
    auto st = d_->cache->stats();
    EXPECT_LE(st.pages, d_->cache->capacity_pages());
  }
  void ExpectInvariants() {
    Status s = d_->meta->CheckInvariants();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }

  // Waits (bounded) until the prefetcher has fetched `n` blocks in all.
  ::testing::AssertionResult WaitForPrefetches(std::uint64_t n) {
    for (int i = 0; i < 2000; ++i) {
      const std::uint64_t got = d_->cache->stats().prefetches;
      if (got >= n) return ::testing::AssertionSuccess();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return ::testing::AssertionFailure()
           << "still " << d_->cache->stats().prefetches << " prefetches after 10 s, want " << n;
  }
  void RunConcurrentModel();
  // A file holding `src`, fsynced, then a restart with readahead on: the
  // data are in the engine and the cache is empty.
  Ino FsyncedFileThenColdStart(const std::string& name, const Bytes& src) {
    const Ino ino = MakeFile(name);
    EXPECT_EQ(d_->data->Write(ino, 0, src), 0);
    EXPECT_EQ(d_->data->Fsync(ino), 0);
    readahead_ = 1;
    Crash();
    Start();
    return ino;
  }

  s3oram::testing::TempDir dir_;
  std::string state_;
  s3oram::testing::MemoryBlockEngine engine_{kB, kCapacityBlocks};
  std::uint32_t readahead_ = 0;
  std::uint64_t prefetched_ = 0;  // by RunConcurrentModel's daemon
  std::unique_ptr<Daemon> d_;
};

TEST_F(FileDataTest, ReadingMoreThanTheCacheKeepsItBounded) {
  const Ino ino = MakeFile("big");
  const std::size_t n = 16 * kCachePages * kB;  // 16x the cache
  const Bytes src = Pattern(n, 1);
  ASSERT_EQ(d_->data->Write(ino, 0, src), 0);
  ASSERT_EQ(d_->data->Flush(ino), 0);
  ExpectCacheWithinCapacity();
  // Block by block, then in one large read, then backwards: every read loads
  // clean pages, and each one must leave the cache within capacity.
  for (std::size_t off = 0; off < n; off += kB) {
    ASSERT_EQ(ReadAll(ino, off, kB), Bytes(src.begin() + off, src.begin() + off + kB)) << off;
    ExpectCacheWithinCapacity();
  }
  EXPECT_EQ(ReadAll(ino, 0, n), src);
  ExpectCacheWithinCapacity();
  for (std::size_t off = n; off > 0; off -= kB) {
    ASSERT_EQ(ReadAll(ino, off - kB, kB), Bytes(src.begin() + off - kB, src.begin() + off));
    ExpectCacheWithinCapacity();
  }
  EXPECT_GT(d_->cache->stats().loads, 2 * n / kB);  // the data really came from the engine
}

TEST_F(FileDataTest, WritingMoreThanTheCacheWritesBackAndLosesNothing) {
  const Ino ino = MakeFile("big");
  const std::size_t n = 16 * kCachePages * kB;
  const Bytes src = Pattern(n, 2);
  // Unaligned 1000-byte writes: partial blocks are coalesced in the cache and
  // pushed out by the shrinker, never more than the capacity held.
  for (std::size_t off = 0; off < n; off += 1000) {
    const std::size_t len = std::min<std::size_t>(1000, n - off);
    ASSERT_EQ(d_->data->Write(ino, off, std::span(src).subspan(off, len)), 0);
    ExpectCacheWithinCapacity();
  }
  EXPECT_GE(engine_.writes, static_cast<int>(n / kB - kCachePages));
  EXPECT_EQ(ReadAll(ino, 0, n), src);
  ASSERT_EQ(d_->data->Fsync(ino), 0);
  EXPECT_EQ(d_->cache->stats().dirty, 0u);
  Crash();
  Start();
  EXPECT_EQ(ReadAll(ino, 0, n), src);  // fsynced: survives the crash
  ExpectInvariants();
}

TEST_F(FileDataTest, ReusedBlocksNeverShowThePreviousOwnersBytes) {
  // File a fills blocks that go back to the free list; file b then gets
  // them and must read zeros wherever it has not written, before and after
  // write-back and across a crash that loses b's unflushed data.
  const Ino a = MakeFile("a");
  ASSERT_EQ(d_->data->Write(a, 0, Pattern(8 * kB, 3)), 0);
  ASSERT_EQ(d_->data->Fsync(a), 0);
  bool orphaned = false;
  ASSERT_EQ(d_->meta->Unlink(kRootIno, "a", &orphaned), 0);
  ASSERT_TRUE(orphaned);
  ASSERT_EQ(d_->data->ForgetIfOrphan(a, [] { return true; }), 0);

  const Ino b = MakeFile("b");
  const Bytes head = Pattern(100, 4);
  ASSERT_EQ(d_->data->Write(b, 0, head), 0);           // partial first block
  ASSERT_EQ(d_->data->Write(b, 7 * kB + 5, head), 0);  // partial last block, hole between
  Bytes expect(7 * kB + 105, 0);
  std::copy(head.begin(), head.end(), expect.begin());
  std::copy(head.begin(), head.end(), expect.begin() + 7 * kB + 5);
  EXPECT_EQ(ReadAll(b, 0, expect.size()), expect);

  // A fallocated range is mapped (to blocks a used) yet reads as zeros.
  ASSERT_EQ(d_->data->Allocate(b, kB, 4 * kB), 0);
  EXPECT_EQ(ReadAll(b, 0, expect.size()), expect);

  Crash();  // b's data were never written back
  Start();
  Attr attr;
  ASSERT_EQ(d_->meta->GetAttr(b, &attr), 0);
  const Bytes after = ReadAll(b, 0, attr.size);
  for (std::size_t i = 0; i < after.size(); ++i) {
    ASSERT_NE(after[i], s3oram::testing::MemoryBlockEngine::kStale) << "offset " << i;
    ASSERT_TRUE(after[i] == 0 || after[i] == expect[i]) << "offset " << i;
  }
  ExpectInvariants();
}

TEST_F(FileDataTest, ShrinkThenGrowReadsZerosPastTheOldEnd) {
  const Ino ino = MakeFile("f");
  const Bytes src = Pattern(3 * kB, 5);
  ASSERT_EQ(d_->data->Write(ino, 0, src), 0);
  ASSERT_EQ(d_->data->Fsync(ino), 0);  // the ORAM holds the full blocks
  Attr a;
  ASSERT_EQ(d_->data->Truncate(ino, kB + 10, &a), 0);
  ASSERT_EQ(d_->data->Truncate(ino, 3 * kB, &a), 0);
  Bytes expect(3 * kB, 0);
  std::copy(src.begin(), src.begin() + kB + 10, expect.begin());
  EXPECT_EQ(ReadAll(ino, 0, 3 * kB), expect);

  // Same after the cached page is gone (the tail is hidden by the block's
  // valid length, not only by the cache).
  for (int i = 0; i < 2 * static_cast<int>(kCachePages); ++i) {
    const Ino other = MakeFile("evict" + std::to_string(i));
    ASSERT_EQ(d_->data->Write(other, 0, Pattern(kB, 100 + i)), 0);
    (void)ReadAll(other, 0, kB);
  }
  EXPECT_EQ(ReadAll(ino, 0, 3 * kB), expect);
  Crash();
  Start();
  EXPECT_EQ(ReadAll(ino, 0, 3 * kB), expect);
  ExpectInvariants();
}

TEST_F(FileDataTest, OrphanIsKeptWhileTheKernelStillKnowsIt) {
  const Ino ino = MakeFile("f");
  const Bytes src = Pattern(2 * kB, 6);
  ASSERT_EQ(d_->data->Write(ino, 0, src), 0);
  bool orphaned = false;
  ASSERT_EQ(d_->meta->Unlink(kRootIno, "f", &orphaned), 0);
  ASSERT_TRUE(orphaned);
  FsStats before;
  ASSERT_EQ(d_->meta->StatFs(&before), 0);

  // A lookup raced the forget: the inode and its dirty data stay.
  ASSERT_EQ(d_->data->ForgetIfOrphan(ino, [] { return false; }), 0);
  EXPECT_EQ(ReadAll(ino, 0, src.size()), src);
  EXPECT_TRUE(d_->cache->HasDirty(ino));

  // Still forgotten: blocks and cached pages go, nothing is written back.
  const int writes = engine_.writes;
  ASSERT_EQ(d_->data->ForgetIfOrphan(ino, [] { return true; }), 0);
  Attr a;
  EXPECT_EQ(d_->meta->GetAttr(ino, &a), ENOENT);
  EXPECT_FALSE(d_->cache->HasDirty(ino));
  EXPECT_EQ(engine_.writes, writes);
  FsStats after;
  ASSERT_EQ(d_->meta->StatFs(&after), 0);
  EXPECT_EQ(after.free_blocks, before.free_blocks + 2);
  ExpectInvariants();
}

TEST_F(FileDataTest, FailedWriteBackSurfacesAtFsyncAndIsRetried) {
  const Ino ino = MakeFile("f");
  const Bytes src = Pattern(2 * kB, 7);
  ASSERT_EQ(d_->data->Write(ino, 0, src), 0);
  engine_.fail = true;
  EXPECT_EQ(d_->data->Fsync(ino), EIO);
  EXPECT_TRUE(d_->cache->HasDirty(ino));
  engine_.fail = false;
  ASSERT_EQ(d_->data->Fsync(ino), 0);
  Crash();
  Start();
  EXPECT_EQ(ReadAll(ino, 0, src.size()), src);
}

void FileDataTest::RunConcurrentModel() {
  const std::uint64_t seed = s3oram::testing::TestSeed();
  constexpr int kThreads = 4;
  constexpr std::size_t kFileBytes = 6 * kB;
  std::vector<Ino> inos;
  for (int t = 0; t < kThreads; ++t) inos.push_back(MakeFile("f" + std::to_string(t)));
  std::vector<Bytes> models(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + static_cast<std::uint64_t>(t));
      Bytes& model = models[t];
      for (int op = 0; op < 300; ++op) {
        const std::uint64_t off = rng() % kFileBytes;
        const std::size_t len = 1 + rng() % (2 * kB);
        switch (rng() % 4) {
          case 0:
          case 1: {
            const Bytes src = Pattern(len, rng());
            if (d_->data->Write(inos[t], off, src) != 0) ++failures;
            if (model.size() < off + len) model.resize(off + len, 0);
            std::copy(src.begin(), src.end(), model.begin() + off);
            break;
          }
          case 2: {
            Bytes out;
            if (d_->data->Read(inos[t], off, len, &out) != 0) ++failures;
            const std::size_t end = std::min<std::size_t>(model.size(), off + len);
            const Bytes want = off < end ? Bytes(model.begin() + off, model.begin() + end) : Bytes();
            if (out != want) ++failures;
            break;
          }
          case 3: {
            Attr a;
            const std::uint64_t size = rng() % kFileBytes;
            if (d_->data->Truncate(inos[t], size, &a) != 0) ++failures;
            model.resize(size, 0);
            break;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0) << "seed " << seed;
  ASSERT_EQ(d_->cache->Shrink(), 0);  // pages of then-locked inodes may have been skipped
  ExpectCacheWithinCapacity();
  ASSERT_EQ(d_->data->FlushAllAndSync(), 0);
  prefetched_ = d_->cache->stats().prefetches;
  Crash();
  Start();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(ReadAll(inos[t], 0, 2 * kFileBytes + 2 * kB), models[t]) << "file " << t;
  }
  ExpectInvariants();
}

TEST_F(FileDataTest, ConcurrentFilesAgreeWithAModel) { RunConcurrentModel(); }

// Readahead running beside writes, truncates and reads of the same files
// (prefetches of dirty, partial, truncated and freed blocks) changes no
// byte anyone reads.
TEST_F(FileDataTest, ConcurrentFilesAgreeWithAModelWithReadahead) {
  readahead_ = 2;
  Start();
  RunConcurrentModel();
  std::printf("[ info     ] %llu blocks fetched ahead\n",
              static_cast<unsigned long long>(prefetched_));
}

// A sequential reader finds each next block already fetched; the prefetcher
// never reads past the end of the file.
TEST_F(FileDataTest, SequentialReadsFindTheNextBlockFetchedAhead) {
  const Bytes src = Pattern(4 * kB, 7);
  const Ino ino = FsyncedFileThenColdStart("seq", src);
  for (std::uint64_t b = 0; b < 4; ++b) {
    ASSERT_EQ(ReadAll(ino, b * kB, kB), Bytes(src.begin() + b * kB, src.begin() + (b + 1) * kB))
        << b;
    if (b + 1 < 4) {
      ASSERT_TRUE(WaitForPrefetches(b + 1)) << "after reading block " << b;
    }
  }
  const auto st = d_->cache->stats();
  EXPECT_EQ(st.prefetches, 3u);             // blocks 1, 2, 3; none past the end
  EXPECT_EQ(st.loads - st.prefetches, 1u);  // only block 0 was loaded by a read
}

// Reads that are not sequential, or stop early in a block, fetch nothing
// ahead. (The prefetcher serves its queue in order, so once a later
// sequential read's block has been fetched, anything queued before it would
// have been too.)
TEST_F(FileDataTest, RandomAndShortReadsFetchNothingAhead) {
  const Bytes src = Pattern(8 * kB, 8);
  const Ino ino = FsyncedFileThenColdStart("rnd", src);
  // Into the second half of block 6, with no earlier read nearby: random.
  EXPECT_EQ(ReadAll(ino, 6 * kB + kB / 2, 100),
            Bytes(src.begin() + 6 * kB + kB / 2, src.begin() + 6 * kB + kB / 2 + 100));
  // At offset 0 but ending in the first half of block 0: a header peek.
  EXPECT_EQ(ReadAll(ino, 0, 100), Bytes(src.begin(), src.begin() + 100));
  // Far from the previous read (block 3's second half after block 0's start).
  EXPECT_EQ(ReadAll(ino, 3 * kB + kB - 50, 50),
            Bytes(src.begin() + 4 * kB - 50, src.begin() + 4 * kB));
  // Now a sequential continuation of the last read: block 4 is fetched ahead.
  EXPECT_EQ(ReadAll(ino, 4 * kB, kB), Bytes(src.begin() + 4 * kB, src.begin() + 5 * kB));
  ASSERT_TRUE(WaitForPrefetches(1));
  EXPECT_EQ(d_->cache->stats().prefetches, 1u);
  EXPECT_TRUE(d_->cache->Cached(PageKey{ino, 5}));
  EXPECT_FALSE(d_->cache->Cached(PageKey{ino, 1}));
}

// Readahead ramps up: one block ahead when a reader starts, twice as many
// with each block read in sequence up to the limit (2 here, the cache
// holding 4 pages), and back to one after a jump. Each count is exact: the
// prefetcher counts a batch's blocks before loading them, so a window that
// did not ramp (2 from the start) shows at once.
TEST_F(FileDataTest, ReadaheadRampsUpFromOneBlockAndRestartsAfterAJump) {
  const Bytes src = Pattern(16 * kB, 9);
  const Ino ino = MakeFile("ramp");
  ASSERT_EQ(d_->data->Write(ino, 0, src), 0);
  ASSERT_EQ(d_->data->Fsync(ino), 0);
  readahead_ = 2;
  Crash();
  Start();
  auto read_block = [&](std::uint64_t b) {
    EXPECT_EQ(ReadAll(ino, b * kB, kB), Bytes(src.begin() + b * kB, src.begin() + (b + 1) * kB))
        << "block " << b;
  };
  // {block read, prefetches in all after it}
  const std::pair<std::uint64_t, std::uint64_t> steps[] = {
      {0, 1},  // window 1: block 1
      {1, 3},  // window 2: blocks 2, 3
      {2, 4},  // window 2: blocks 3 (already there) and 4
      {11, 4}, // a jump: a new stream, nothing fetched for it yet
      {12, 5}, // window 1: block 13
      {13, 7}, // window 2: blocks 14, 15
  };
  for (const auto& [block, prefetches] : steps) {
    read_block(block);
    // After a jump nothing is queued: the counts only say so once the next
    // read has been served.
    if (block != 11) {
      ASSERT_TRUE(WaitForPrefetches(prefetches)) << "after block " << block;
    }
    EXPECT_EQ(d_->cache->stats().prefetches, prefetches) << "after block " << block;
  }
}

}  // namespace
}  // namespace s3oram::fs

// Pipelined accesses (OramClient::AccessMany) against real servers:
//  * random batches of reads, writes and updates, with blocks repeated
//    inside a batch and across batches (served from the client's copy or
//    from a pending root write), racing slowed background evictions, every
//    result checked against a model in batch order;
//  * a writer of pipelined batches killed at random: every batch it saw
//    return reads back, and each block of the batch in flight holds its old
//    or its new content;
//  * a server killed and restarted while batches run: the client's
//    resends after the reconnection never turn into wrong data.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "tests/integration/cluster_fixture.h"
#include "tests/support/test_scale.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::FastRetryOptions;
using testing::SmallParams;

constexpr std::uint32_t kBlock = 256;

// One random batch checked against the model, in order: a write of fresh
// content, an update that flips the first byte, or a read. `ids` small
// enough that blocks repeat inside batches.
::testing::AssertionResult ModelBatch(OramClient& c, testing::BlockModel& model,
                                      std::mt19937_64& rng, std::uint64_t ids, std::size_t size) {
  struct Want {
    std::vector<std::uint8_t> returned;
  };
  std::vector<OramClient::BatchItem> items(size);
  std::vector<std::vector<std::uint8_t>> contents(size);
  std::vector<Want> wants(size);
  const OramClient::BlockModifier flip = [](std::span<std::uint8_t> b) { b[0] ^= 0xff; };
  auto current = [&](BlockId id) {
    const auto it = model.find(id);
    return it == model.end() ? std::vector<std::uint8_t>(c.block_bytes(), 0) : it->second;
  };
  for (std::size_t j = 0; j < size; ++j) {
    const BlockId id = rng() % ids;
    const int kind = static_cast<int>(rng() % 3);
    items[j].id = id;
    if (kind == 0) {
      contents[j] = testing::Content(c.block_bytes(), id, rng());
      items[j].op = AccessOp::kWrite;
      items[j].data = contents[j];
      wants[j].returned = current(id);
      model[id] = contents[j];
    } else if (kind == 1) {
      items[j].op = AccessOp::kWrite;
      items[j].modify = &flip;
      auto b = current(id);
      b[0] ^= 0xff;
      model[id] = b;
      wants[j].returned = b;
    } else {
      items[j].op = AccessOp::kRead;
      wants[j].returned = current(id);
    }
  }
  auto results = c.AccessMany(items);
  if (results.size() != size) {
    return ::testing::AssertionFailure() << results.size() << " results for " << size << " items";
  }
  for (std::size_t j = 0; j < size; ++j) {
    if (!results[j].ok()) {
      return ::testing::AssertionFailure() << "item " << j << " (block " << items[j].id
                                           << "): " << results[j].status().ToString();
    }
    if (*results[j] != wants[j].returned) {
      return ::testing::AssertionFailure() << "item " << j << " (block " << items[j].id << ", "
                                           << (items[j].modify                   ? "update"
                                               : items[j].op == AccessOp::kWrite ? "write"
                                                                                 : "read")
                                           << ") returned other bytes than the model";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(PipelineTest, BatchesWithRepeatsRacingEvictionsMatchAModel) {
  constexpr std::uint32_t kA = 24, kH = 4;
  auto fs = testing::MakeFs(SmallParams(kBlock, kA, kH));
  ASSERT_TRUE(fs);
  {
    const Status st = testing::RestartAllWithFault(*fs, "server.evict_prepare.mid_rounds~15");
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  testing::BlockModel model;
  auto client = testing::TestOpen(fs->state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const int batches = testing::ScaledForBuild(60, 10, 20);
  std::uint64_t items = 0;
  for (int b = 0; b < batches; ++b) {
    const std::size_t size = 1 + rng() % (OramClient::kMaxPipelined + 5);
    ASSERT_TRUE(ModelBatch(**client, model, rng, 12, size))
        << "batch " << b << " (seed " << seed << ")";
    items += size;
    const Status inv = (*client)->position_map().CheckInvariants();
    ASSERT_TRUE(inv.ok()) << "batch " << b << ": " << inv.ToString();
    if (b % 17 == 16) {  // pending root writes are sent by Close, or the next Open
      client->reset();
      client = testing::TestOpen(fs->state, FastRetryOptions());
      ASSERT_TRUE(client.ok()) << client.status().ToString();
    }
  }
  // Every access is one root write: the servers applied them all in order.
  ASSERT_TRUE((*client)->Sync().ok());
  std::printf("[ pipeline ] seed %llu: %d batches, %llu accesses, %llu evictions\n",
              static_cast<unsigned long long>(seed), batches,
              static_cast<unsigned long long>(items),
              static_cast<unsigned long long>((*client)->counters().ne));
  EXPECT_GE((*client)->counters().ne, items / kA - 1);
  for (const auto& [id, want] : model) {
    auto r = (*client)->Read(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value(), want) << "block " << id;
  }
}

// Child: writes batches of distinct random blocks forever, announcing each
// batch on `fd` before (kind 1) and after (kind 2) it. Never returns.
[[noreturn]] void BatchWriterChild(const std::string& state, std::uint64_t seed, int fd) {
  auto client = testing::TestOpen(state, FastRetryOptions());
  if (!client.ok()) ::_exit(3);
  std::mt19937_64 rng(seed);
  const std::uint64_t n = (*client)->params().capacity_blocks;
  for (int i = 0; i < 1000000; ++i) {
    const std::size_t size = 1 + rng() % OramClient::kMaxPipelined;
    std::vector<std::uint64_t> rec{1, size};
    std::map<BlockId, std::uint64_t> batch;
    while (batch.size() < size) batch[rng() % n] = rng();
    for (const auto& [id, tag] : batch) {
      rec.push_back(id);
      rec.push_back(tag);
    }
    const std::size_t bytes = rec.size() * sizeof(std::uint64_t);
    if (::write(fd, rec.data(), bytes) != static_cast<ssize_t>(bytes)) ::_exit(4);
    std::vector<std::vector<std::uint8_t>> contents;
    std::vector<OramClient::BatchItem> items;
    for (const auto& [id, tag] : batch) contents.push_back(testing::Content(kBlock, id, tag));
    std::size_t j = 0;
    for (const auto& [id, tag] : batch)
      items.push_back({AccessOp::kWrite, id, contents[j++], nullptr});
    for (const auto& r : (*client)->AccessMany(items)) {
      if (!r.ok()) ::_exit(5);
    }
    const std::uint64_t done = 2;
    if (::write(fd, &done, sizeof done) != sizeof done) ::_exit(4);
  }
  ::_exit(0);
}

TEST(PipelineTest, KilledWriterOfBatchesLosesNothingThatReturned) {
  auto fs = testing::MakeFs(SmallParams(kBlock, 16, 5));
  ASSERT_TRUE(fs);
  {
    const Status st = testing::RestartAllWithFault(*fs, "server.evict_prepare.mid_rounds~25");
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  std::map<BlockId, std::uint64_t> model;  // id -> tag of returned content
  const int rounds = testing::ScaledForBuild(12, 3, 4);
  int in_flight_seen = 0;
  for (int round = 0; round < rounds; ++round) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      BatchWriterChild(fs->state, seed + 1000 + round, fds[1]);
    }
    ::close(fds[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 600));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "writer exited early with " << WEXITSTATUS(status);
    // Replay: a batch announced and finished is returned; the last one
    // announced and not finished was in flight.
    std::map<BlockId, std::uint64_t> in_flight;
    for (;;) {
      std::uint64_t kind = 0;
      if (::read(fds[0], &kind, sizeof kind) != sizeof kind) break;
      if (kind == 2) {
        for (const auto& [id, tag] : in_flight) model[id] = tag;
        in_flight.clear();
        continue;
      }
      std::uint64_t size = 0;
      ASSERT_EQ(::read(fds[0], &size, sizeof size), static_cast<ssize_t>(sizeof size));
      in_flight.clear();
      for (std::uint64_t j = 0; j < size; ++j) {
        std::uint64_t pair[2];
        ASSERT_EQ(::read(fds[0], pair, sizeof pair), static_cast<ssize_t>(sizeof pair));
        in_flight[pair[0]] = pair[1];
      }
    }
    ::close(fds[0]);
    auto client = testing::TestOpen(fs->state, FastRetryOptions());
    ASSERT_TRUE(client.ok()) << "round " << round << ": " << client.status().ToString();
    for (const auto& [id, tag] : in_flight) {
      auto r = (*client)->Read(id);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      const auto it = model.find(id);
      const auto old = it == model.end() ? std::vector<std::uint8_t>(kBlock, 0)
                                         : testing::Content(kBlock, id, it->second);
      const auto fresh = testing::Content(kBlock, id, tag);
      ASSERT_TRUE(r.value() == old || r.value() == fresh)
          << "round " << round << ": block " << id << " of the batch in flight is neither";
      if (r.value() == fresh) model[id] = tag;
      ++in_flight_seen;
    }
    for (const auto& [id, tag] : model) {
      auto r = (*client)->Read(id);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(r.value(), testing::Content(kBlock, id, tag))
          << "round " << round << ": block " << id << " (seed " << seed << ")";
    }
  }
  std::printf("[ pipeline ] seed %llu: %d kills, %zu blocks verified, %d of batches in flight\n",
              static_cast<unsigned long long>(seed), rounds, model.size(), in_flight_seen);
  EXPECT_GT(model.size(), 0u);
}

TEST(PipelineTest, ServerRestartedWhileBatchesRunNeverYieldsWrongData) {
  auto fs = testing::MakeFs(SmallParams(kBlock, 16, 5));
  ASSERT_TRUE(fs);
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  testing::BlockModel model;
  auto client = testing::TestOpen(fs->state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  // Batches run on a thread of their own while this one kills and restarts
  // server 1 twice (this thread: a server's parent-death signal follows the
  // thread that started it).
  std::atomic<bool> restarted{false};
  int batches = 0, failed_items = 0;
  std::string failure;
  std::thread worker([&] {
    for (; batches < 400 && !(restarted && batches > 40) && failure.empty(); ++batches) {
      // Distinct blocks per batch; items that fail (the server was down for
      // longer than the client waits) leave their blocks as they were.
      std::map<BlockId, std::vector<std::uint8_t>> batch;
      const std::size_t size = 1 + rng() % OramClient::kMaxPipelined;
      while (batch.size() < size) batch[rng() % 40] = {};
      std::vector<OramClient::BatchItem> items;
      std::vector<bool> writes;
      for (auto& [id, content] : batch) {
        const bool write = rng() % 2 == 0;
        writes.push_back(write);
        if (write) {
          content = testing::Content(kBlock, id, rng());
          items.push_back({AccessOp::kWrite, id, content, nullptr});
        } else {
          items.push_back({AccessOp::kRead, id, {}, nullptr});
        }
      }
      auto results = (*client)->AccessMany(items);
      if (results.size() != items.size()) {
        failure = "wrong number of results";
        break;
      }
      for (std::size_t j = 0; j < items.size() && failure.empty(); ++j) {
        const BlockId id = items[j].id;
        if (!results[j].ok()) {
          if (results[j].status().code() != Status::Code::kUnavailable) {
            failure = "block " + std::to_string(id) + ": " + results[j].status().ToString();
          }
          ++failed_items;
          continue;
        }
        const auto it = model.find(id);
        const auto want = it == model.end() ? std::vector<std::uint8_t>(kBlock, 0) : it->second;
        if (*results[j] != want) {
          failure = "batch " + std::to_string(batches) + ", block " + std::to_string(id) +
                    " returned other bytes than the model";
        }
        if (writes[j]) model[id] = batch[id];
      }
    }
  });
  Status restart_status = Status::Ok();
  for (int i = 0; i < 2 && restart_status.ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    restart_status = fs->cluster->Kill(1, SIGKILL);
    if (restart_status.ok()) restart_status = fs->cluster->Restart(1);
  }
  restarted = true;
  worker.join();
  ASSERT_TRUE(restart_status.ok()) << restart_status.ToString();
  ASSERT_TRUE(failure.empty()) << failure << " (seed " << seed << ")";
  std::printf(
      "[ pipeline ] seed %llu: %d batches across two restarts of a server, %d items "
      "failed, %llu resends\n",
      static_cast<unsigned long long>(seed), batches, failed_items,
      static_cast<unsigned long long>((*client)->transport_stats().resends));
  for (const auto& [id, want] : model) {
    auto r = (*client)->Read(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value(), want) << "block " << id;
  }
}

}  // namespace
}  // namespace s3oram

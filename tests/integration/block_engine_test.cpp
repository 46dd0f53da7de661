// OramBlockEngine (fused/block_engine.h) over real servers: a read that
// waits for the engine is let in between the pieces of a long batch, and a
// batch cut into pieces of one (reads slow, batch_slicer.h) gives the same
// results, repeats included, as the accesses would alone.
#include "fused/block_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "tests/integration/cluster_fixture.h"
#include "tests/support/test_seed.h"

namespace s3oram::fs {
namespace {

using s3oram::testing::Content;
using s3oram::testing::FastRetryOptions;
using s3oram::testing::SmallParams;

// Waits (bounded) until `engine` has `n` callers waiting.
bool AwaitWaiters(const OramBlockEngine& engine, std::uint64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (engine.waiters() != n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(BlockEngineTest, AWaitingReadGoesBetweenThePiecesOfABatch) {
  const std::uint64_t seed = s3oram::testing::TestSeed();
  std::mt19937_64 rng(seed);
  const OramParams params = SmallParams(256, 8, 5);
  auto fs = s3oram::testing::MakeFs(params);
  ASSERT_TRUE(fs);
  auto client = s3oram::testing::TestOpen(fs->state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  // A slice of zero: any read that waits at all makes later batches go in
  // pieces of one access.
  OramBlockEngine engine(std::move(*client), OramClient::kMaxPipelined,
                         std::chrono::steady_clock::duration::zero());
  const std::uint32_t bytes = engine.block_bytes();
  std::map<std::uint64_t, std::vector<std::uint8_t>> model;
  const std::uint64_t ids = 12;
  for (std::uint64_t id = 0; id < ids; ++id) {
    model[id] = Content(bytes, id, rng());
    ASSERT_TRUE(engine.Write(id, model[id]).ok());
  }

  // A batch of 16 (in several pipelined chunks): its first access starts a
  // reader of block `read_id` and holds on until that reader waits for the
  // engine. The reader must finish while the batch still runs: the engine
  // lets it in after the first chunk, and the batch's last access (in a
  // later chunk, under the engine's lock) waits for the reader to be done.
  // Without the engine letting it in, the reader waits for all 16 and the
  // last access sees it not done (after a bounded wait).
  const std::uint64_t read_id = rng() % ids;
  std::atomic<bool> read_done{false};
  Result<std::vector<std::uint8_t>> read_result = Status::FailedPrecondition("not read");
  std::thread reader;
  std::once_flag started, checked;
  bool reader_waited = false;
  bool read_done_inside_batch = false;
  const BlockEngine::Modifier start_reader = [&](std::span<std::uint8_t> b) {
    std::call_once(started, [&] {
      reader = std::thread([&] {
        read_result = engine.Read(read_id);
        read_done = true;
      });
      reader_waited = AwaitWaiters(engine, 1);
    });
    b[0] ^= 0x5a;
  };
  const BlockEngine::Modifier await_reader = [&](std::span<std::uint8_t> b) {
    std::call_once(checked, [&] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!read_done && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      read_done_inside_batch = read_done;
    });
    b[0] ^= 0xa5;
  };
  std::vector<BlockEngine::Op> ops;
  std::vector<std::vector<std::uint8_t>> contents(16);
  for (std::size_t j = 0; j < 16; ++j) {
    // Writes to blocks other than the reader's, so its content is known.
    std::uint64_t id = (read_id + 1 + j % (ids - 1)) % ids;
    BlockEngine::Op op;
    op.id = id;
    if (j == 0 || j == 15) {
      op.kind = BlockEngine::Op::Kind::kUpdate;
      op.modify = j == 0 ? &start_reader : &await_reader;
    } else {
      op.kind = BlockEngine::Op::Kind::kWrite;
      contents[j] = Content(bytes, id, rng());
      op.data = contents[j];
    }
    ops.push_back(op);
  }
  const std::vector<std::uint8_t> read_want = model.at(read_id);
  auto results = engine.Batch(ops);
  ASSERT_TRUE(reader.joinable());
  reader.join();
  ASSERT_TRUE(reader_waited) << "the reader never queued for the engine";
  ASSERT_TRUE(read_result.ok()) << read_result.status().ToString();
  EXPECT_EQ(*read_result, read_want);
  EXPECT_TRUE(read_done_inside_batch) << "the read waited for the whole batch";
  for (std::size_t j = 0; j < ops.size(); ++j) {
    ASSERT_TRUE(results[j].ok()) << j << ": " << results[j].status().ToString();
    if (j == 0 || j == 15) {
      model[ops[j].id][0] ^= j == 0 ? 0x5a : 0xa5;
    } else {
      model[ops[j].id] = contents[j];
    }
  }

  // A read waited (a slice of zero: the batch's own first op, a read, is
  // one too, so the 30 s window cannot have run out): the next batch goes
  // one access at a time. Reads, writes and updates with repeats, checked
  // in order.
  const std::uint64_t pieces_before = engine.stats().pieces;
  const BlockEngine::Modifier flip = [](std::span<std::uint8_t> b) { b[1] ^= 0xff; };
  std::vector<BlockEngine::Op> mixed;
  std::vector<std::vector<std::uint8_t>> mixed_contents(16), want(16);
  for (std::size_t j = 0; j < 16; ++j) {
    BlockEngine::Op op;
    op.id = rng() % 4;  // repeats
    const int kind = j == 0 ? 2 : static_cast<int>(rng() % 3);
    if (kind == 0) {
      op.kind = BlockEngine::Op::Kind::kWrite;
      mixed_contents[j] = Content(bytes, op.id, rng());
      op.data = mixed_contents[j];
      model[op.id] = mixed_contents[j];
    } else if (kind == 1) {
      op.kind = BlockEngine::Op::Kind::kUpdate;
      op.modify = &flip;
      model[op.id][1] ^= 0xff;
      want[j] = model[op.id];
    } else {
      op.kind = BlockEngine::Op::Kind::kRead;
      want[j] = model[op.id];
    }
    mixed.push_back(op);
  }
  auto mixed_results = engine.Batch(mixed);
  for (std::size_t j = 0; j < mixed.size(); ++j) {
    ASSERT_TRUE(mixed_results[j].ok()) << j << ": " << mixed_results[j].status().ToString();
    if (mixed[j].kind != BlockEngine::Op::Kind::kWrite) {
      EXPECT_EQ(*mixed_results[j], want[j]) << "op " << j << " on block " << mixed[j].id;
    }
  }
  EXPECT_EQ(engine.stats().pieces - pieces_before, mixed.size());
  for (const auto& [id, bytes_want] : model) {
    auto got = engine.Read(id);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, bytes_want) << "block " << id;
  }
  ASSERT_TRUE(engine.Close().ok());
}

// At a constant rate an fsync is a tick's dummy access, which carries the
// latest root write, and a local sync after it. If that access cannot reach
// the servers the root write is not on them, and the fsync must fail, not
// report the local sync's success.
TEST(BlockEngineTest, AtAConstantRateSyncFailsWhenItsAccessCannotReachTheServers) {
  const OramParams params = SmallParams(256, 8, 5);
  auto fs = s3oram::testing::MakeFs(params);
  ASSERT_TRUE(fs);
  ClientOptions options = FastRetryOptions();
  options.requests.deadline = std::chrono::milliseconds(2000);  // a dead server fails fast
  auto client = s3oram::testing::TestOpen(fs->state, options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  OramBlockEngine engine(std::move(*client));
  engine.EnableConstantRate(std::chrono::milliseconds(10));
  const std::vector<std::uint8_t> data = Content(engine.block_bytes(), 3, 7);
  ASSERT_TRUE(engine.Write(3, data).ok());
  ASSERT_TRUE(engine.Sync().ok());
  auto back = engine.Read(3);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);

  for (std::size_t i = 0; i < fs->cluster->endpoints().size(); ++i) {
    ASSERT_TRUE(fs->cluster->Kill(i, SIGKILL).ok());
  }
  (void)engine.Write(4, data);  // fails too; the fsync's answer is the point
  const Status synced = engine.Sync();
  EXPECT_FALSE(synced.ok()) << "an fsync whose access reached no server reported success";
  const auto ticks = engine.ticker_stats();
  ASSERT_TRUE(ticks.has_value());
  EXPECT_GT(ticks->ticks, 0u);
  EXPECT_GE(ticks->min_gap, std::chrono::milliseconds(10));
  (void)engine.Close();
}

}  // namespace
}  // namespace s3oram::fs

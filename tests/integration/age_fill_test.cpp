// age-fill (benchmarks only): a new tree brought to the cost of an aged one.
// Every bucket of every server must hold written data afterwards (no sparse
// hole left for a retrieval to skip), the filled slots must be what every
// check takes for empty slots (accesses and evictions over them match a
// model, scrub finds every sharing consistent), and a tree that has been
// used must be refused, by the client and by each server on its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <vector>

#include "oramcore/protocol/scrub.h"
#include "serverd/share_store.h"
#include "tests/integration/cluster_fixture.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::FastRetryOptions;
using testing::SmallParams;

// True if every bucket of the server's share file has a nonzero byte.
void ExpectEveryBucketWritten(const std::string& shares, const OramParams& p) {
  const std::uint64_t bucket_bytes =
      std::uint64_t{p.bucket_size} * p.elems_per_slot() * sizeof(field::Elem);
  std::ifstream f(shares, std::ios::binary);
  ASSERT_TRUE(f.good()) << shares;
  auto at = serverd::StoreInspection::InspectFile(shares);
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  std::vector<char> bucket(bucket_bytes);
  for (std::uint64_t b = 1; b <= p.geometry().num_buckets(); ++b) {
    f.seekg(static_cast<std::streamoff>((*at)[b].data));
    f.read(bucket.data(), static_cast<std::streamsize>(bucket.size()));
    ASSERT_EQ(f.gcount(), static_cast<std::streamsize>(bucket.size())) << shares << " bucket " << b;
    EXPECT_TRUE(std::any_of(bucket.begin(), bucket.end(), [](char c) { return c != 0; }))
        << shares << ": bucket " << b << " is still zeros";
  }
}

TEST(AgeFillTest, FilledTreeHasNoHoleAndServesAccessesAndEvictionsLikeANewOne) {
  constexpr std::uint32_t kA = 8, kH = 4, kBlock = 256;
  const OramParams params = SmallParams(kBlock, kA, kH);
  auto fs = testing::MakeFs(params);
  ASSERT_TRUE(fs);
  auto client = testing::TestOpen(fs->state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::uint64_t reported = 0;
  const Status filled = (*client)->AgeFill([&](std::uint64_t done, std::uint64_t total) {
    EXPECT_EQ(done, reported + 1);
    EXPECT_EQ(total, params.geometry().num_buckets());
    reported = done;
  });
  ASSERT_TRUE(filled.ok()) << filled.ToString();
  EXPECT_EQ(reported, params.geometry().num_buckets());
  for (int i = 0; i < 3; ++i) {
    ExpectEveryBucketWritten(fs->cluster->dir() + "/data-" + std::to_string(i) + "/shares.bin",
                             params);
  }

  // Accesses over the filled tree, with enough evictions to rewrite every
  // bucket (2^(H-1) of them), checked against a model: the eviction's
  // cross-server and share-MAC checks read the filled slots as empty.
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  testing::BlockModel model;
  const int accesses = static_cast<int>(kA) * ((1 << (kH - 1)) + 2);
  for (int i = 0; i < accesses; ++i) {
    const BlockId id = rng() % (3 * kA);
    const bool write = rng() % 2 == 0;
    ASSERT_TRUE(testing::ModelAccess(**client, model, id, write, rng()))
        << "access " << i << " (seed " << seed << ")";
  }
  ASSERT_TRUE((*client)->Sync().ok());
  EXPECT_GE((*client)->counters().ne, std::uint64_t{1} << (kH - 1));

  // Every slot verifies on every server and is one consistent sharing.
  auto findings =
      ScrubAndCompare(params, (*client)->parity_rows(), (*client)->participants(),
                      [&](std::uint64_t first, std::uint32_t count, const wire::ParitySeed& s) {
                        return (*client)->ParityAll(first, count, s, std::chrono::seconds(30));
                      },
                      {});
  ASSERT_TRUE(findings.ok()) << findings.status().ToString();
  for (const auto& f : findings->servers) EXPECT_EQ(f.damaged, 0u);
  EXPECT_EQ(findings->inconsistent.damaged, 0u);

  // A used filesystem: the client refuses before sending anything...
  const Status again = (*client)->AgeFill();
  EXPECT_EQ(again.code(), Status::Code::kFailedPrecondition) << again.ToString();
  EXPECT_NE(again.message().find("has been used"), std::string::npos) << again.ToString();
  // ...and each server refuses on its own account, whatever a client says.
  wire::Header h = (*client)->session().NextHeader();
  const auto frame = wire::Encode(h, wire::AgeFillRequest{1, 1, {}});
  std::vector<std::vector<std::uint8_t>> frames((*client)->session().servers().size(), frame);
  auto refused = (*client)->session().servers().Exchange(
      frames, h, wire::MessageType::kAgeFillReply, FastRetryOptions().requests);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kFailedPrecondition)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("has been used"), std::string::npos)
      << refused.status().ToString();

  // Nothing was overwritten: every block still reads as written.
  for (const auto& [id, content] : model) {
    auto r = (*client)->Read(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value(), content) << "block " << id << " (seed " << seed << ")";
  }
}

}  // namespace
}  // namespace s3oram

// A rebuild's masked terms go from the survivors straight to the target K
// (REBUILD_TERMS over the peer channel, serverd/peer_exchange.h), never
// through the client. On an in-process cluster, whose hub shows the test
// every REBUILD_TERMS it delivers, the test checks what each party sees:
// the client no share data at all, K only masked terms that sum to its
// lost share, each range under masks of its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/math/shamir.h"
#include "oramcore/protocol/client.h"
#include "oramcore/protocol/rebuild.h"
#include "tests/integration/cluster_fixture.h"
#include "tests/support/in_process_cluster.h"
#include "tests/support/share_file.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using field::Elem;
using testing::BlockModel;
using testing::InProcessCluster;

TEST(RebuildRelayTest, TheTargetSeesOnlyMaskedTermsAndTheClientNoShare) {
  const std::uint64_t seed = testing::TestSeed();
  testing::TempDir dir;
  InProcessCluster::Options co;
  co.servers = 3;
  auto cluster = InProcessCluster::Create(dir.Sub("servers"), co);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  InProcessCluster& c = **cluster;
  FsConfig config;
  config.params = testing::SmallParams(1024, 8, 6);
  config.servers = c.endpoints();
  config.server_keys = c.public_keys();
  config.client_key_file = dir.Sub("unused-client.key");
  const std::string state = dir.Sub("fs.s3oram");
  ASSERT_TRUE(OramClient::Initialize(state, config, testing::TestPassphrase(), testing::TestKdf(),
                                     false, c.connector())
                  .ok());
  ClientOptions options;
  options.connect = c.connector();
  options.requests.deadline = std::chrono::milliseconds(1000);

  BlockModel model;
  {
    auto client = OramClient::Open(state, testing::TestPassphrase(), options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    for (BlockId id = 0; id < 200; ++id) {
      ASSERT_TRUE(testing::ModelAccess(**client, model, id, /*write=*/true, seed));
    }
    ASSERT_TRUE((*client)->Close().ok());
  }
  const std::size_t k = seed % 3;
  std::printf("rebuilding server %zu\n", k);
  // The raw shares as the servers hold them, read before anything changes.
  std::vector<std::vector<Elem>> raw(3);
  for (std::size_t i = 0; i < 3; ++i) {
    raw[i] =
        testing::ShareFileElems(dir.Sub("servers") + "/server" + std::to_string(i) + "/shares.bin");
    ASSERT_FALSE(raw[i].empty());
  }
  ASSERT_TRUE(c.Wipe(k).ok());

  std::mutex mu;
  std::vector<std::pair<std::size_t, wire::RebuildTerms>> delivered;
  c.ObserveTerms([&](std::size_t to, const wire::RebuildTerms& t) {
    const std::lock_guard lock(mu);
    delivered.emplace_back(to, t);
  });
  std::vector<wire::RebuildWriteRequest> writes;
  std::uint64_t client_messages = 0;
  const std::size_t be = std::size_t{config.params.bucket_size} * config.params.elems_per_slot();
  RebuildOptions o;
  o.target = k;
  o.client = options;
  o.range_bytes = 20 * be * sizeof(Elem);  // several ranges
  o.observe = [&](std::size_t server, const wire::Message& m) {
    ++client_messages;
    if (std::holds_alternative<wire::RebuildReadReply>(m.body)) {
      EXPECT_NE(server, k);
    } else if (const auto* w = std::get_if<wire::RebuildWriteRequest>(&m.body)) {
      EXPECT_EQ(server, k);
      writes.push_back(*w);
    } else {
      // Every message type that could carry a share is listed in the variant:
      // any other one here would be a new path for shares through the client.
      ADD_FAILURE() << "unexpected observed message " << wire::MessageTypeName(m.header.type);
    }
  };
  auto report = RebuildServer(state, testing::TestPassphrase(), o);
  c.ObserveTerms({});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->blocks_verified, model.size());
  ASSERT_EQ(report->participants.size(), 2u);
  ASSERT_GE(writes.size(), 3u) << "the test needs several ranges";
  EXPECT_GT(client_messages, writes.size());
  const std::vector<std::size_t>& parts = report->participants;
  std::vector<std::uint32_t> parts32(parts.begin(), parts.end());

  // Each range is read under a nonce of its own: a bucket sent again after
  // an eviction changed it (a catch-up's later pass) gets new masks.
  std::map<wire::RebuildNonce, std::set<std::uint64_t>> ranges_of_nonce;
  for (const auto& [to, t] : delivered) {
    EXPECT_EQ(to, k);
    EXPECT_EQ(t.target, k);
    EXPECT_NE(std::find(parts.begin(), parts.end(), t.from_index), parts.end());
    ranges_of_nonce[t.nonce].insert(t.first_bucket);
  }
  EXPECT_EQ(ranges_of_nonce.size(), writes.size());
  for (const auto& [nonce, firsts] : ranges_of_nonce) EXPECT_EQ(firsts.size(), 1u);

  std::vector<Elem> xs;
  for (std::size_t j : parts) xs.push_back(shamir::PartyX(j));
  auto lag = shamir::LagrangeAt(xs, shamir::PartyX(k));
  ASSERT_TRUE(lag.ok());
  std::map<std::size_t, Elem> lambda;
  for (std::size_t i = 0; i < xs.size(); ++i) lambda[parts[i]] = (*lag)[i];

  // K receives c_j = L_j s_j + r_j from each participant j, r_j a uniform
  // mask independent of every share, so one comparison of c_j with any
  // fixed share-derived value holds with probability exactly 1/p. Events
  // are counted per position (bucket, element), once whatever the number
  // of copies or comparisons that hold there (c_j = L_j s_j and c_i = L_i s_i
  // are one event when t + 1 = 2, as r_i = -r_j): by the union bound a
  // position shows a match with probability at most D / p, D the
  // comparisons made there, independently of the other positions.
  const std::size_t n_elems = raw[k].size();
  std::vector<std::vector<Elem>> got(parts.size(), std::vector<Elem>(n_elems));
  std::vector<std::vector<std::uint8_t>> have(parts.size(), std::vector<std::uint8_t>(n_elems, 0));
  std::vector<std::uint8_t> hit(n_elems, 0);
  auto part_of = [&](std::size_t server) {
    return static_cast<std::size_t>(std::find(parts.begin(), parts.end(), server) - parts.begin());
  };
  for (const auto& [to, t] : delivered) {
    const std::size_t part = part_of(t.from_index);
    ASSERT_LT(part, parts.size());
    std::size_t at = 0;
    for (std::size_t i = 0; i < t.holes.size(); ++i) {
      if (t.holes[i]) continue;
      const std::size_t base = (t.first_bucket + i - 1) * be;
      for (std::size_t e = 0; e < be; ++e, ++at) {
        ASSERT_LT(at, t.terms.size());
        const Elem v = t.terms[at];
        const std::size_t q = base + e;
        have[part][q] = 1;
        got[part][q] = v;
        bool match = v == raw[k][q];
        for (std::size_t j : parts)
          match |= v == raw[j][q] || v == field::Mul(lambda[j], raw[j][q]);
        hit[q] |= match;
      }
    }
  }

  // The terms of each range, as K summed them, are its lost share.
  std::uint64_t sum_mismatch = 0, next = 1, written_buckets = 0;
  for (const auto& w : writes) {
    EXPECT_EQ(w.first_bucket, next);
    EXPECT_EQ(w.participants, parts32);
    next += w.holes.size();
    std::vector<const wire::RebuildTerms*> of(parts.size(), nullptr);
    for (const auto& [to, t] : delivered) {
      if (t.nonce == w.nonce && t.first_bucket == w.first_bucket && t.holes == w.holes) {
        of[part_of(t.from_index)] = &t;
      }
    }
    ASSERT_TRUE(of[0] != nullptr && of[1] != nullptr) << "range " << w.first_bucket;
    std::size_t at = 0;
    for (std::size_t i = 0; i < w.holes.size(); ++i) {
      const std::size_t base = (w.first_bucket + i - 1) * be;
      if (w.holes[i]) {
        // Every participant had a hole: so did the lost server.
        for (std::size_t e = 0; e < be; ++e) sum_mismatch += raw[k][base + e] != 0;
        continue;
      }
      ++written_buckets;
      for (std::size_t e = 0; e < be; ++e, ++at) {
        sum_mismatch += field::Add(of[0]->terms[at], of[1]->terms[at]) != raw[k][base + e];
      }
    }
  }
  EXPECT_EQ(next - 1, n_elems / be) << "every bucket covered once, in order";
  EXPECT_GT(written_buckets, 0u);
  EXPECT_EQ(sum_mismatch, 0u) << "the terms must sum to the lost share";

  // No mask stream is used twice (another bucket, range or offset): the
  // masks r_j = c_j - L_j s_j, recovered here from the raw shares, must not
  // repeat a run of 3 consecutive elements of one bucket anywhere. For
  // uniform masks a repeat has probability below n^2 / p^3 < 1e-15.
  std::uint64_t mask_repeats = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::size_t j = parts[i];
    std::vector<std::pair<std::uint64_t, Elem>> runs;
    for (std::size_t q = 0; q + 2 < n_elems; ++q) {
      if (q % be + 2 >= be || !have[i][q] || !have[i][q + 1] || !have[i][q + 2]) continue;
      Elem r[3];
      for (std::size_t d = 0; d < 3; ++d) {
        r[d] = field::Sub(got[i][q + d], field::Mul(lambda[j], raw[j][q + d]));
      }
      runs.emplace_back(std::uint64_t{r[0]} << 32 | r[1], r[2]);
    }
    std::sort(runs.begin(), runs.end());
    mask_repeats += static_cast<std::uint64_t>(runs.end() - std::unique(runs.begin(), runs.end()));
  }
  EXPECT_EQ(mask_repeats, 0u) << "a mask stream was used twice";

  std::uint64_t positions = 0, hits = 0;
  for (std::size_t q = 0; q < n_elems; ++q) {
    bool seen = false;
    for (std::size_t i = 0; i < parts.size(); ++i) seen |= have[i][q] != 0;
    positions += seen;
    hits += hit[q];
  }
  EXPECT_GT(positions, 100000u);
  // At most D = t+1 received values times (2(t+1) + 1) share-derived ones
  // per position; the limit L is the least with P(hits >= L) <=
  // (positions * D / p)^L / L! below 1e-9.
  const double mean = static_cast<double>(positions) *
                      static_cast<double>(parts.size() * (2 * parts.size() + 1)) /
                      static_cast<double>(field::kPrime);
  std::uint64_t limit = 1;
  double tail = mean;  // bounds P(hits >= limit)
  while (tail > 1e-9) tail *= mean / static_cast<double>(++limit);
  EXPECT_LT(hits, limit) << "of " << positions << " positions, " << hits
                         << " show a share-derived value (at most " << limit - 1
                         << " by chance, P < 1e-9)";

  auto client = OramClient::Open(state, testing::TestPassphrase(), options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  for (const auto& [id, want] : model) {
    auto r = testing::ModelAccess(**client, model, id, /*write=*/false, 0);
    ASSERT_TRUE(r) << "block " << id;
  }
}

}  // namespace
}  // namespace s3oram

// What a server sees (issue 4, docs/SECURITY.md): every server's transcript
// is recorded by a watching proxy for workloads of equal length that differ
// only in what the client does:
//   W1  one block read 1,024 times,
//   W2  1,024 distinct blocks read once each,
//   W3  1,024 writes of random blocks,
// and the same three as pipelined batches (OramClient::AccessMany).
// Message types and sizes must form identical sequences on every server
// (resends, which depend on the machine's load and not on the workload, taken
// out: each must be the identical frame);
// retrieval paths must look uniform (chi-square, even when one block is read
// over and over); root writes must walk the slots 0..A-1 in order; eviction
// paths must be exactly the deterministic reverse-lexicographic sequence.
// With four servers, one whose answers are changed is outvoted and changes
// none of that, and neither does one found down and excluded (the three
// others then see the same of every workload, and it is sent nothing).
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/integration/cluster_fixture.h"
#include "tests/support/tamper_proxy.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::TamperMode;
using testing::TamperProxy;
using testing::TranscriptEntry;

// Upper critical value of chi-square with `df` degrees of freedom at
// significance 1e-6 (Wilson-Hilferty; z = 4.753). A false alarm is a
// one-in-a-million event per check.
double ChiSquareCritical(double df) {
  const double z = 4.753, k = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - k + z * std::sqrt(k), 3.0);
}

struct Shape {
  bool from_client;
  wire::MessageType type;
  std::size_t bytes;
  bool operator==(const Shape&) const = default;
};

// The transcript with resends taken out. How often the client resends after
// a silence depends on how busy the machine and the link are, not on what the
// client does, so the comparison below is of what remains. A resent request
// must be the identical frame (same seq, same bytes: it tells the server
// nothing new); the server's reply to it is dropped too. `resends` counts the
// requests taken out.
std::vector<TranscriptEntry> WithoutResends(const std::vector<TranscriptEntry>& t,
                                            std::uint64_t* resends) {
  std::map<std::pair<wire::MessageType, std::uint64_t>, std::uint64_t> requests;  // -> digest
  std::set<std::pair<wire::MessageType, std::uint64_t>> replies;
  std::vector<TranscriptEntry> out;
  for (const auto& e : t) {
    const auto key = std::make_pair(e.type, e.seq);
    if (e.from_client) {
      auto [it, first] = requests.emplace(key, e.digest);
      if (!first) {
        EXPECT_EQ(it->second, e.digest) << "a request with seq " << e.seq << " ("
                                        << wire::MessageTypeName(e.type)
                                        << ") was sent twice with different contents";
        ++*resends;
        continue;
      }
    } else if (!replies.insert(key).second) {
      continue;
    }
    out.push_back(e);
  }
  return out;
}

// The requests in the order sent, then the replies in the order sent. How
// a pipelined run's replies interleave with its requests on the wire is
// timing (when each answer is ready), not what the client accesses. STATUS
// is left out: besides the burst at Open (alike in every run) the client
// polls it while an eviction runs longer than a second (pacing), which
// depends on how busy the machine is, not on the workload (SECURITY.md).
std::vector<Shape> Shapes(const std::vector<TranscriptEntry>& t) {
  std::vector<Shape> out;
  for (bool from_client : {true, false}) {
    for (const auto& e : t) {
      if (e.type == wire::MessageType::kStatusRequest ||
          e.type == wire::MessageType::kStatusReply) {
        continue;
      }
      if (e.from_client == from_client) out.push_back({e.from_client, e.type, e.bytes});
    }
  }
  return out;
}

// A filesystem of `params` on real servers, each behind a watching proxy
// (the client talks to the proxies), written in full (block id's content is
// Content(256, id, 0)), and its open client.
struct ProxiedFs {
  testing::TempDir dir;
  std::unique_ptr<cluster::LocalCluster> cluster;
  std::vector<std::unique_ptr<TamperProxy>> proxies;
  std::unique_ptr<OramClient> client;
  std::vector<std::vector<std::uint8_t>> model;
};

std::unique_ptr<ProxiedFs> StartProxiedFs(const OramParams& params) {
  auto fs = std::make_unique<ProxiedFs>();
  fs->cluster = testing::StartCluster(fs->dir.Sub("cluster"), 20000, params.parties);
  if (!fs->cluster) return nullptr;
  FsConfig config;
  config.params = params;
  for (std::size_t i = 0; i < fs->cluster->endpoints().size(); ++i) {
    fs->proxies.push_back(TamperProxy::Start(fs->cluster->endpoints()[i],
                                             fs->cluster->server_public_keys()[i],
                                             fs->cluster->client_key_file()));
    if (!fs->proxies.back()) return nullptr;
    config.servers.push_back(fs->proxies.back()->endpoint());
    config.server_keys.push_back(fs->proxies.back()->public_key());
  }
  config.client_key_file = fs->cluster->client_key_file();
  const std::string state = fs->dir.Sub("fs.s3oram");
  if (Status st = testing::TestInitialize(state, config); !st.ok()) {
    ADD_FAILURE() << st.ToString();
    return nullptr;
  }
  auto c = testing::TestOpen(state, testing::FastRetryOptions());
  if (!c.ok()) {
    ADD_FAILURE() << c.status().ToString();
    return nullptr;
  }
  fs->client = std::move(c).value();
  fs->model.resize(params.capacity_blocks);
  for (BlockId id = 0; id < params.capacity_blocks; ++id) {
    fs->model[id] = testing::Content(256, id, 0);
    if (Status st = fs->client->Write(id, fs->model[id]); !st.ok()) {
      ADD_FAILURE() << "block " << id << ": " << st.ToString();
      return nullptr;
    }
  }
  return fs;
}

// One retrieval per access (`accesses` in all) in transcript `t`, their
// leaves uniform (chi-square over 32 bins).
void ExpectOneUniformRetrievalPerAccess(const std::vector<TranscriptEntry>& t,
                                        const TreeGeometry& geo, std::uint64_t accesses,
                                        const std::string& what) {
  std::vector<std::uint64_t> bins(32, 0);
  std::uint64_t retrievals = 0;
  for (const auto& e : t) {
    if (!e.from_client) continue;
    if (e.type == wire::MessageType::kRetrieveWriteRootRequest ||
        e.type == wire::MessageType::kRetrieveRequest) {
      ASSERT_GE(e.leaf, geo.first_leaf());
      ASSERT_LT(e.leaf - geo.first_leaf(), geo.num_leaves());
      ++bins[(e.leaf - geo.first_leaf()) * bins.size() / geo.num_leaves()];
      ++retrievals;
    }
  }
  EXPECT_EQ(retrievals, accesses) << what << ": an access was retried";
  const double expect = double(retrievals) / double(bins.size());
  double chi2 = 0;
  for (std::uint64_t b : bins) chi2 += (double(b) - expect) * (double(b) - expect) / expect;
  const double critical = ChiSquareCritical(double(bins.size() - 1));
  std::printf("[ leakage  ] %s: retrieval leaves chi2 = %.1f (df %zu, critical %.1f)\n",
              what.c_str(), chi2, bins.size() - 1, critical);
  EXPECT_LT(chi2, critical) << what << ": retrieval paths are not uniform";
}

// Server s's transcripts of every workload (runs[w][s], named names[w]):
// the same message shapes as the first, one uniform retrieval per access.
void ExpectWorkloadsLookAlike(const std::vector<std::vector<std::vector<TranscriptEntry>>>& runs,
                              std::size_t s, const char* const* names, const TreeGeometry& geo,
                              std::uint64_t accesses) {
  const auto reference = Shapes(runs[0][s]);
  ASSERT_FALSE(reference.empty());
  for (std::size_t w = 1; w < runs.size(); ++w) {
    EXPECT_TRUE(Shapes(runs[w][s]) == reference)
        << "server " << s << " can tell '" << names[w] << "' from '" << names[0] << "'";
  }
  for (std::size_t w = 0; w < runs.size(); ++w) {
    ExpectOneUniformRetrievalPerAccess(runs[w][s], geo, accesses,
                                       "server " + std::to_string(s) + ", " + names[w]);
  }
}

TEST(LeakageTest, ServersSeeTheSameThingWhateverTheWorkload) {
  const OramParams params = testing::SmallParams(256, 8, 8);  // 1,024 blocks, 256 leaves
  const TreeGeometry geo = params.geometry();
  testing::TempDir dir;
  auto cluster = testing::StartCluster(dir.Sub("cluster"));
  ASSERT_TRUE(cluster);
  std::vector<std::unique_ptr<TamperProxy>> proxies;
  FsConfig config;
  config.params = params;
  for (std::size_t i = 0; i < cluster->endpoints().size(); ++i) {
    proxies.push_back(TamperProxy::Start(cluster->endpoints()[i], cluster->server_public_keys()[i],
                                         cluster->client_key_file()));
    ASSERT_TRUE(proxies.back());
    config.servers.push_back(proxies.back()->endpoint());
    config.server_keys.push_back(proxies.back()->public_key());
  }
  config.client_key_file = cluster->client_key_file();
  const std::string state = dir.Sub("fs.s3oram");
  ASSERT_TRUE(testing::TestInitialize(state, config).ok());
  auto c = testing::TestOpen(state, testing::FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto rng = testing::SeededRng();

  const std::uint64_t n = params.capacity_blocks;  // 1,024: a multiple of A
  ASSERT_EQ(n % params.evict_rate, 0u);
  for (BlockId id = 0; id < n; ++id) {
    ASSERT_TRUE((*c)->Write(id, testing::Content(256, id, 0)).ok());
  }
  ASSERT_EQ((*c)->counters().nr, 0u);

  std::vector<std::vector<std::vector<TranscriptEntry>>> runs;  // [workload][server]
  auto run = [&](const std::function<void(std::uint64_t)>& access) {
    for (auto& p : proxies) p->ClearTranscript();
    for (std::uint64_t i = 0; i < n; ++i) access(i);
    std::vector<std::vector<TranscriptEntry>> per_server;
    for (std::size_t i = 0; i < proxies.size(); ++i) {
      std::uint64_t resends = 0;
      per_server.push_back(WithoutResends(proxies[i]->transcript(), &resends));
      std::printf("[ leakage  ] workload %zu, server %zu: %llu resent request(s) taken out\n",
                  runs.size(), i, static_cast<unsigned long long>(resends));
    }
    runs.push_back(std::move(per_server));
  };
  run([&](std::uint64_t) { ASSERT_TRUE((*c)->Read(0).ok()); });
  std::vector<BlockId> order(n);
  for (BlockId id = 0; id < n; ++id) order[id] = id;
  std::shuffle(order.begin(), order.end(), rng);
  run([&](std::uint64_t i) { ASSERT_TRUE((*c)->Read(order[i]).ok()); });
  run([&](std::uint64_t i) {
    ASSERT_TRUE((*c)->Write(rng() % n, testing::Content(256, i, 1)).ok());
  });
  // The same three pipelined (AccessMany, batches of kMaxPipelined): a batch
  // of one block read over and over is served from the client's copy after
  // its first item, and must look like any other batch.
  constexpr std::size_t kBatch = OramClient::kMaxPipelined;
  ASSERT_EQ(n % kBatch, 0u);
  auto batched = [&](std::function<OramClient::BatchItem(std::uint64_t)> item) {
    auto items = std::make_shared<std::vector<OramClient::BatchItem>>();
    return [&c, item, items](std::uint64_t i) {
      items->push_back(item(i));
      if (items->size() < kBatch) return;
      for (const auto& r : (*c)->AccessMany(*items)) ASSERT_TRUE(r.ok()) << r.status().ToString();
      items->clear();
    };
  };
  run(batched([](std::uint64_t) { return OramClient::BatchItem{AccessOp::kRead, 0, {}, nullptr}; }));
  run(batched([&](std::uint64_t i) {
    return OramClient::BatchItem{AccessOp::kRead, order[i], {}, nullptr};
  }));
  std::vector<std::vector<std::uint8_t>> contents(n);
  run(batched([&](std::uint64_t i) {
    const BlockId id = rng() % n;
    contents[i] = testing::Content(256, i, 2);
    return OramClient::BatchItem{AccessOp::kWrite, id, contents[i], nullptr};
  }));
  ASSERT_EQ(runs.size(), 6u);

  const char* names[] = {"one block read 1,024 times", "1,024 distinct reads", "1,024 writes",
                         "one block read 1,024 times, pipelined",
                         "1,024 distinct reads, pipelined", "1,024 writes, pipelined"};
  for (std::size_t s = 0; s < 3; ++s) {
    // Single accesses against single accesses, pipelined against pipelined
    // (the servers see when the client pipelines, not what it accesses).
    for (std::size_t first : {std::size_t{0}, std::size_t{3}}) {
      const auto reference = Shapes(runs[first][s]);
      ASSERT_FALSE(reference.empty());
      for (std::size_t w = first + 1; w < first + 3; ++w) {
        const auto shapes = Shapes(runs[w][s]);
        EXPECT_TRUE(shapes == reference)
            << "server " << s << " can tell '" << names[w] << "' from '" << names[first] << "'";
      }
    }
    for (std::size_t w = 0; w < runs.size(); ++w) {
      const auto& t = runs[w][s];
      std::vector<std::uint64_t> bins(64, 0);
      std::uint64_t retrievals = 0, next_slot = 0, evictions = 0;
      // The newest eviction started at the end of the last run is still in
      // flight (background eviction): one more started than committed.
      std::uint64_t expected_eviction = (*c)->counters().ne + 1 -
                                        runs.size() * n / params.evict_rate +
                                        w * n / params.evict_rate;
      for (const auto& e : t) {
        if (!e.from_client) continue;
        // A RETRIEVE_WRITE_ROOT is both: the previous access's root write
        // (one slot after the last) and this access's retrieval.
        const bool combined = e.type == wire::MessageType::kRetrieveWriteRootRequest;
        if (combined || e.type == wire::MessageType::kWriteRootRequest) {
          EXPECT_EQ(e.slot, next_slot) << names[w];
          next_slot = (next_slot + 1) % params.evict_rate;
        }
        if (combined || e.type == wire::MessageType::kRetrieveRequest) {
          ASSERT_GE(e.leaf, geo.first_leaf());
          ASSERT_LT(e.leaf - geo.first_leaf(), geo.num_leaves());
          ++bins[(e.leaf - geo.first_leaf()) * bins.size() / geo.num_leaves()];
          ++retrievals;
        } else if (e.type == wire::MessageType::kEvictPrepareRequest) {
          EXPECT_EQ(e.eviction, expected_eviction) << names[w];
          EXPECT_EQ(e.leaf, geo.EvictionLeaf(e.eviction))
              << names[w] << ": eviction " << e.eviction << " off the reverse-lexicographic order";
          ++expected_eviction;
          ++evictions;
        }
      }
      EXPECT_EQ(retrievals, n);
      EXPECT_EQ(evictions, n / params.evict_rate);
      const double expect = double(retrievals) / double(bins.size());
      double chi2 = 0;
      for (std::uint64_t b : bins) chi2 += (double(b) - expect) * (double(b) - expect) / expect;
      const double critical = ChiSquareCritical(double(bins.size() - 1));
      std::printf("[ leakage  ] server %zu, %s: retrieval leaves chi2 = %.1f (df %zu, critical %.1f)\n",
                  s, names[w], chi2, bins.size() - 1, critical);
      EXPECT_LT(chi2, critical) << "server " << s << ", " << names[w]
                                << ": retrieval paths are not uniform";
    }
  }
}

// The three workloads of the four-server tests, n accesses each (one block
// read n times, n distinct reads, n writes of 256-byte blocks), through
// fs's client and `read` (which checks what it read against fs's model):
// each server's transcript of each, resends dropped. [workload][server]
template <class Fs, class Rng, class Read>
std::vector<std::vector<std::vector<TranscriptEntry>>> RunThreeWorkloads(Fs& fs, Rng& rng,
                                                                         std::uint64_t n,
                                                                         const Read& read) {
  std::vector<std::vector<std::vector<TranscriptEntry>>> runs;
  auto run = [&](const std::function<void(std::uint64_t)>& access) {
    for (auto& p : fs.proxies) p->ClearTranscript();
    for (std::uint64_t i = 0; i < n; ++i) access(i);
    std::vector<std::vector<TranscriptEntry>> per_server;
    for (auto& p : fs.proxies) {
      std::uint64_t resends = 0;
      per_server.push_back(WithoutResends(p->transcript(), &resends));
    }
    runs.push_back(std::move(per_server));
  };
  run([&](std::uint64_t) { read(0); });
  std::vector<BlockId> order(n);
  for (BlockId id = 0; id < n; ++id) order[id] = id;
  std::shuffle(order.begin(), order.end(), rng);
  run([&](std::uint64_t i) { read(order[i]); });
  run([&](std::uint64_t i) {
    const BlockId id = rng() % n;
    fs.model[id] = testing::Content(256, id, i + 1);
    ASSERT_TRUE(fs.client->Write(id, fs.model[id]).ok());
  });
  return runs;
}

// Issue 44, point 7: a liar among four servers is outvoted (any three answers
// give the degree-2 answer) and excluded, which changes nothing the others
// see. Server L's retrieval answers are changed in transit (a bit flipped in
// every one) while one block is read until the client has excluded L: every
// access returns the right bytes with one retrieval on each honest server
// (no access is retried, no path repeated). Then three workloads of n
// accesses with L still lying: L is sent nothing but STATUS, and the three
// others see identical message shapes across the workloads, one retrieval
// per access and uniform paths. Each changed answer is counted against L
// and no other server.
TEST(LeakageTest, AnOutvotedLiarAmongFourIsExcludedAndChangesNothingTheOthersSee) {
  const std::uint64_t seed = testing::TestSeed();
  OramParams params = testing::SmallParams(256, 8, 7);  // 512 blocks, 64 leaves
  params.parties = 4;
  const TreeGeometry geo = params.geometry();
  const std::size_t liar = seed % 4;
  std::printf("[ seed     ] %llu: server %zu's answers are changed\n",
              static_cast<unsigned long long>(seed), liar);
  auto fs = StartProxiedFs(params);
  ASSERT_TRUE(fs);
  auto& proxies = fs->proxies;
  auto& model = fs->model;
  OramClient& client = *fs->client;
  auto rng = testing::SeededRng();
  const std::uint64_t n = params.capacity_blocks;
  ASSERT_EQ(n % params.evict_rate, 0u);
  auto read = [&](BlockId id) {
    auto got = client.Read(id);
    ASSERT_TRUE(got.ok()) << "block " << id << ": " << got.status().ToString();
    ASSERT_EQ(*got, model[id]) << "block " << id;
  };

  for (auto& p : proxies) p->ClearTranscript();
  proxies[liar]->SetMode(TamperMode::kBitFlip, 1.0);
  std::uint64_t accesses = 0;
  for (; accesses < n && client.TakeSnapshot().exclusions.empty(); ++accesses) read(0);
  const auto excluded = client.TakeSnapshot().exclusions;
  ASSERT_EQ(excluded.size(), 1u) << "server " << liar << " not excluded";
  EXPECT_EQ(excluded[0].server, liar);
  EXPECT_TRUE(excluded[0].suspect);
  for (std::size_t s = 0; s < proxies.size(); ++s) {
    if (s == liar) continue;
    std::uint64_t resends = 0, retrievals = 0;
    for (const auto& e : WithoutResends(proxies[s]->transcript(), &resends)) {
      retrievals += e.from_client && (e.type == wire::MessageType::kRetrieveRequest ||
                                      e.type == wire::MessageType::kRetrieveWriteRootRequest);
    }
    EXPECT_EQ(retrievals, accesses) << "server " << s << ": an access until the exclusion was "
                                    << "retried or took more than one retrieval";
  }
  // From two rounds on, the rounds are as always (the eviction under way
  // went again among the three).
  const std::uint64_t ne = client.counters().ne;
  while (client.counters().ne < ne + 2 || client.counters().nr != 0) read(0);

  const auto runs = RunThreeWorkloads(*fs, rng, n, read);  // [workload][server]
  ASSERT_EQ(runs.size(), 3u);
  proxies[liar]->SetMode(TamperMode::kNone, 0.0);
  const std::uint64_t tampered = proxies[liar]->tampered();
  EXPECT_GE(tampered, 1u) << "the liar's answers were not changed";
  ASSERT_TRUE(client.Close().ok());
  const std::vector<std::uint64_t>& wrong = client.stats().wrong_answers;
  ASSERT_EQ(wrong.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(wrong[i], i == liar ? tampered : 0) << "server " << i;
  }
  const char* names[] = {"one block read n times", "n distinct reads", "n writes"};
  for (std::size_t s = 0; s < 4; ++s) {
    if (s == liar) {
      for (const auto& per_run : runs) {
        for (const auto& e : per_run[s]) {
          EXPECT_FALSE(e.from_client && e.type != wire::MessageType::kStatusRequest)
              << "the excluded liar was sent " << wire::MessageTypeName(e.type);
        }
      }
      continue;
    }
    ExpectWorkloadsLookAlike(runs, s, names, geo, n);
  }
}

// Issue 44, point 7: a server found down and excluded changes nothing the
// others see. Server X of four is killed; accesses go on until the client
// has excluded it and two more rounds have passed (the eviction under way
// then went again among the three). Then three workloads of n accesses
// each (one block read n times, n distinct reads, n writes): every access
// succeeds, each participant sees the same message shapes in all three,
// one retrieval per access and uniform paths, and the excluded server is
// sent nothing but the liveness checks (STATUS).
TEST(LeakageTest, AnExcludedServerChangesNothingTheOthersSee) {
  const std::uint64_t seed = testing::TestSeed();
  OramParams params = testing::SmallParams(256, 8, 7);  // 512 blocks, 64 leaves
  params.parties = 4;
  const TreeGeometry geo = params.geometry();
  const std::size_t down = seed % 4;
  std::printf("[ seed     ] %llu: server %zu is killed\n", static_cast<unsigned long long>(seed),
              down);
  auto fs = StartProxiedFs(params);
  ASSERT_TRUE(fs);
  OramClient& client = *fs->client;
  auto& model = fs->model;
  auto rng = testing::SeededRng();
  const std::uint64_t n = params.capacity_blocks;
  ASSERT_TRUE(fs->cluster->Kill(down, SIGKILL).ok());
  auto read = [&](BlockId id) {
    auto got = client.Read(id);
    ASSERT_TRUE(got.ok()) << "block " << id << ": " << got.status().ToString();
    ASSERT_EQ(*got, model[id]) << "block " << id;
  };
  for (std::uint64_t i = 0; i < n && client.TakeSnapshot().exclusions.empty(); ++i) read(0);
  ASSERT_EQ(client.TakeSnapshot().exclusions.size(), 1u) << "server " << down << " not excluded";
  EXPECT_EQ(client.TakeSnapshot().exclusions[0].server, down);
  const std::uint64_t ne = client.counters().ne;
  while (client.counters().ne < ne + 2 || client.counters().nr != 0) read(0);

  const auto runs = RunThreeWorkloads(*fs, rng, n, read);  // [workload][server]
  ASSERT_EQ(runs.size(), 3u);
  for (std::uint64_t w : client.stats().wrong_answers) EXPECT_EQ(w, 0u);
  ASSERT_TRUE(client.Close().ok());

  const char* names[] = {"one block read n times", "n distinct reads", "n writes"};
  for (std::size_t s = 0; s < 4; ++s) {
    if (s == down) {
      for (const auto& per_run : runs) {
        for (const auto& e : per_run[s]) {
          EXPECT_FALSE(e.from_client && e.type != wire::MessageType::kStatusRequest)
              << "the excluded server was sent " << wire::MessageTypeName(e.type);
        }
      }
      continue;
    }
    ExpectWorkloadsLookAlike(runs, s, names, geo, n);
  }
}

// A server excluded, then back and caught up (OramClient::CatchUpExcluded,
// what a mount's keep-alive beat runs): during the catch-up the returning
// server is sent only the catch-up and liveness messages and the others
// only what a rebuild reads of them (masked terms of public buckets), and
// afterwards all four see the same again: identical message shapes across
// workloads, one retrieval per access, uniform leaves.
TEST(LeakageTest, AfterACatchUpEveryServerSeesTheSameAgain) {
  const std::uint64_t seed = testing::TestSeed();
  OramParams params = testing::SmallParams(256, 8, 7);  // 512 blocks, 64 leaves
  params.parties = 4;
  const TreeGeometry geo = params.geometry();
  const std::size_t down = (seed + 1) % 4;
  std::printf("[ seed     ] %llu: server %zu is killed, restarted and caught up\n",
              static_cast<unsigned long long>(seed), down);
  auto fs = StartProxiedFs(params);
  ASSERT_TRUE(fs);
  OramClient& client = *fs->client;
  auto& model = fs->model;
  auto rng = testing::SeededRng();
  const std::uint64_t n = params.capacity_blocks;
  ASSERT_TRUE(fs->cluster->Kill(down, SIGKILL).ok());
  auto read = [&](BlockId id) {
    auto got = client.Read(id);
    ASSERT_TRUE(got.ok()) << "block " << id << ": " << got.status().ToString();
    ASSERT_EQ(*got, model[id]) << "block " << id;
  };
  for (std::uint64_t i = 0; i < n && client.TakeSnapshot().exclusions.empty(); ++i) read(0);
  ASSERT_EQ(client.TakeSnapshot().exclusions.size(), 1u) << "server " << down << " not excluded";
  const std::uint64_t ne = client.counters().ne;
  while (client.counters().ne < ne + 3) read(rng() % n);

  ASSERT_TRUE(fs->cluster->Restart(down).ok());
  for (auto& p : fs->proxies) p->ClearTranscript();
  // As the mount's beats: until the client sees it answer again (bounded).
  auto report = client.CatchUpExcluded(down);
  for (int i = 0; i < 40 && !report.ok() && report.status().code() == Status::Code::kUnavailable;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    report = client.CatchUpExcluded(down);
  }
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->caught_up);
  EXPECT_TRUE(client.TakeSnapshot().exclusions.empty());
  const std::set<wire::MessageType> to_returning = {
      wire::MessageType::kStatusRequest, wire::MessageType::kRebuildBeginRequest,
      wire::MessageType::kRebuildWriteRequest, wire::MessageType::kRebuildFinishRequest,
      wire::MessageType::kLeaseAcquireRequest};
  const std::set<wire::MessageType> to_others = {
      wire::MessageType::kStatusRequest,      wire::MessageType::kRebuildReadRequest,
      wire::MessageType::kEvictResultRequest, wire::MessageType::kEvictCheckRequest,
      wire::MessageType::kMacOpenRequest,     wire::MessageType::kEvictCommitRequest,
      wire::MessageType::kWriteRootRequest,   wire::MessageType::kLeaseAcquireRequest};
  for (std::size_t s = 0; s < 4; ++s) {
    for (const auto& e : fs->proxies[s]->transcript()) {
      if (!e.from_client) continue;
      const auto& allowed = s == down ? to_returning : to_others;
      EXPECT_TRUE(allowed.count(e.type))
          << "server " << s << (s == down ? " (caught up)" : "") << " was sent "
          << wire::MessageTypeName(e.type) << " during the catch-up";
    }
  }

  // The catch-up settled the eviction under way, so the next round starts
  // without one beside it: from two rounds on, the rounds are as always
  // (the same start the exclusion test takes).
  const std::uint64_t after = client.counters().ne;
  while (client.counters().ne < after + 2 || client.counters().nr != 0) read(0);

  const auto runs = RunThreeWorkloads(*fs, rng, n, read);  // [workload][server]
  for (std::uint64_t w : client.stats().wrong_answers) EXPECT_EQ(w, 0u);
  ASSERT_TRUE(client.Close().ok());
  const char* names[] = {"one block read n times", "n distinct reads", "n writes"};
  for (std::size_t s = 0; s < 4; ++s) ExpectWorkloadsLookAlike(runs, s, names, geo, n);
}

}  // namespace
}  // namespace s3oram

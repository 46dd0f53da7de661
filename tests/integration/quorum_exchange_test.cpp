// ServerSet::Wait::kQuorum over the network (wire/server_set.h), on four real
// servers: a request is answered once three servers answered it, and a server
// that has not answered yet lags. Its requests stay with the set (sent again
// on a new connection, failed when it is found down) and their ends are
// handed out once, by TakeLagged or AwaitLagged. A stopped server (SIGSTOP)
// makes every case deterministic: it cannot answer until it is resumed.
// Also what the set learns of the link's pace from small exchanges.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <string>
#include <vector>

#include "oramcore/crypto/curve_keys.h"
#include "oramcore/wire/transport.h"
#include "tests/integration/cluster_fixture.h"

namespace s3oram {
namespace {

constexpr std::size_t kLaggard = 3;

// Sends server `server` SIGCONT when the scope ends (a test stopped it).
struct Resumed {
  cluster::LocalCluster& cluster;
  std::size_t server;
  ~Resumed() { (void)cluster.Kill(server, SIGCONT); }
};

struct QuorumFixture {
  std::unique_ptr<testing::TestFs> fs;
  std::unique_ptr<NetworkServerSet> set;
  wire::Header header;
  // Frames outlive the calls that take views of them.
  std::vector<std::vector<std::vector<std::uint8_t>>> frames;

  static std::unique_ptr<QuorumFixture> Make() {
    auto f = std::make_unique<QuorumFixture>();
    OramParams p = testing::SmallParams(128, 4, 4);
    p.parties = 4;
    f->fs = testing::MakeFs(p);
    if (!f->fs) return nullptr;
    auto key = LoadCurveKeypair(f->fs->cluster->client_key_file());
    EXPECT_TRUE(key.ok()) << key.status().ToString();
    if (!key.ok()) return nullptr;
    auto set = NetworkServerSet::Connect(f->fs->cluster->endpoints(),
                                         f->fs->cluster->server_public_keys(), *key);
    EXPECT_TRUE(set.ok()) << set.status().ToString();
    if (!set.ok()) return nullptr;
    f->set = std::move(set).value();
    f->header = testing::HeaderFromState(f->fs->state);
    f->frames.reserve(256);
    // Every connection made (its CURVE handshake done) before a test stops a
    // server: a request queued before the first connection is not a resend.
    ++f->header.seq;
    const std::vector<std::vector<std::uint8_t>> status(
        4, wire::Encode(f->header, wire::Body{wire::StatusRequest{}}));
    auto warm =
        f->set->Exchange(status, f->header, wire::MessageType::kStatusReply, TransportOptions{});
    EXPECT_TRUE(warm.ok()) << warm.status().ToString();
    if (!warm.ok()) return nullptr;
    return f;
  }

  // `count` requests to all four servers, STATUS and LEASE_QUERY in turn,
  // each under a new seq, three answers needed; `seqs` gets their seqs.
  std::vector<ServerSet::Answers> Ask(
      std::size_t count, std::vector<std::uint64_t>* seqs,
      std::chrono::milliseconds deadline = std::chrono::minutes(2)) {
    std::vector<ServerSet::RequestView> views;
    for (std::size_t r = 0; r < count; ++r) {
      ++header.seq;
      const bool status = r % 2 == 0;
      frames.emplace_back(4, status ? wire::Encode(header, wire::Body{wire::StatusRequest{}})
                                    : wire::Encode(header, wire::Body{wire::LeaseQueryRequest{}}));
      views.push_back({header,
                       status ? wire::MessageType::kStatusReply : wire::MessageType::kLeaseReply,
                       &frames.back()});
      if (seqs) seqs->push_back(header.seq);
    }
    TransportOptions options{std::chrono::milliseconds(2000), deadline};
    options.quorum = 3;
    return set->ExchangeAnswers({0, 1, 2, 3}, views, options, ServerSet::Wait::kQuorum);
  }
};

wire::MessageType TypeOf(std::size_t r) {
  return r % 2 == 0 ? wire::MessageType::kStatusReply : wire::MessageType::kLeaseReply;
}

// The three running servers answer every request; the stopped one lags on
// all of them and its answers come, in order and each once, when it resumes.
TEST(QuorumExchangeTest, AStoppedServerLagsAndItsAnswersComeWhenItResumes) {
  auto f = QuorumFixture::Make();
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->fs->cluster->Kill(kLaggard, SIGSTOP).ok());
  const Resumed resume{*f->fs->cluster, kLaggard};

  std::vector<std::uint64_t> seqs;
  const auto answers = f->Ask(3, &seqs);
  ASSERT_EQ(answers.size(), 3u);
  for (std::size_t r = 0; r < answers.size(); ++r) {
    ASSERT_EQ(answers[r].size(), 4u);
    for (std::size_t k = 0; k < 3; ++k) {
      ASSERT_TRUE(answers[r][k].reply.ok())
          << "request " << r << ", server " << k << ": " << answers[r][k].reply.status().ToString();
      EXPECT_EQ(answers[r][k].reply->header.type, TypeOf(r));
      EXPECT_FALSE(answers[r][k].lagging);
    }
    const auto& late = answers[r][kLaggard];
    EXPECT_TRUE(late.lagging) << "request " << r;
    ASSERT_FALSE(late.reply.ok());
    EXPECT_FALSE(IsSilence(late.reply.status()));
    EXPECT_NE(late.reply.status().message().find("lagging: server 3 (" +
                                                 f->fs->cluster->endpoints()[kLaggard]),
              std::string::npos)
        << late.reply.status().ToString();
  }
  EXPECT_EQ(f->set->Lagging(kLaggard), 3u);
  for (std::size_t k = 0; k < 3; ++k) EXPECT_EQ(f->set->Lagging(k), 0u);

  ASSERT_TRUE(f->fs->cluster->Kill(kLaggard, SIGCONT).ok());
  // The last one first: the two before it end on the way and wait for TakeLagged.
  auto last = f->set->AwaitLagged(kLaggard, seqs[2]);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(last->header.type, TypeOf(2));
  EXPECT_EQ(last->header.seq, seqs[2]);
  const auto taken = f->set->TakeLagged();
  ASSERT_EQ(taken.size(), 2u);
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(taken[r].server, kLaggard);
    EXPECT_EQ(taken[r].seq, seqs[r]);
    ASSERT_TRUE(taken[r].reply.ok()) << taken[r].reply.status().ToString();
    EXPECT_EQ(taken[r].reply->header.type, TypeOf(r));
  }
  // Each end is handed out once.
  EXPECT_EQ(f->set->Lagging(kLaggard), 0u);
  EXPECT_TRUE(f->set->TakeLagged().empty());
  EXPECT_EQ(f->set->AwaitLagged(kLaggard, seqs[2]).status().code(), Status::Code::kNotFound);

  // Up again, it is one of the three that answer.
  const auto again = f->Ask(2, nullptr);
  for (std::size_t r = 0; r < again.size(); ++r) {
    std::size_t answered = 0;
    for (const auto& a : again[r]) answered += a.reply.ok() ? 1 : 0;
    EXPECT_GE(answered, 3u) << "request " << r;
  }
}

// A server that stays stopped is found down (a liveness check, within
// seconds although the deadline is minutes): its lagging requests fail,
// naming it, and the next call fails it at once while the others answer.
TEST(QuorumExchangeTest, ALaggingServerFoundDownFailsItsLaggingRequests) {
  auto f = QuorumFixture::Make();
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->fs->cluster->Kill(kLaggard, SIGSTOP).ok());
  const Resumed resume{*f->fs->cluster, kLaggard};

  std::vector<std::uint64_t> seqs;
  const auto answers = f->Ask(2, &seqs);
  ASSERT_TRUE(answers[1][kLaggard].lagging);
  auto end = f->set->AwaitLagged(kLaggard, seqs[1]);
  ASSERT_FALSE(end.ok());
  EXPECT_TRUE(IsSilence(end.status())) << end.status().ToString();
  EXPECT_NE(end.status().message().find("down: server 3"), std::string::npos)
      << end.status().ToString();
  const auto taken = f->set->TakeLagged();
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].seq, seqs[0]);
  EXPECT_FALSE(taken[0].reply.ok());

  const auto next = f->Ask(1, nullptr);
  for (std::size_t k = 0; k < 3; ++k) EXPECT_TRUE(next[0][k].reply.ok()) << "server " << k;
  EXPECT_FALSE(next[0][kLaggard].lagging);
  EXPECT_TRUE(IsSilence(next[0][kLaggard].reply.status()))
      << next[0][kLaggard].reply.status().ToString();
}

// A lagging server that is restarted (killed while stopped, started again
// on its port) gets its lagging requests again on the new connection, and
// answers them.
TEST(QuorumExchangeTest, LaggingRequestsAreSentAgainOnANewConnection) {
  auto f = QuorumFixture::Make();
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->fs->cluster->Kill(kLaggard, SIGSTOP).ok());
  std::vector<std::uint64_t> seqs;
  const auto answers = f->Ask(2, &seqs);
  ASSERT_TRUE(answers[0][kLaggard].lagging);
  ASSERT_TRUE(answers[1][kLaggard].lagging);
  const std::uint64_t resends_before = f->set->stats().resends;
  ASSERT_TRUE(f->fs->cluster->Kill(kLaggard, SIGKILL).ok());
  ASSERT_TRUE(f->fs->cluster->Restart(kLaggard).ok());
  auto end = f->set->AwaitLagged(kLaggard, seqs[1]);
  ASSERT_TRUE(end.ok()) << end.status().ToString();
  EXPECT_EQ(end->header.type, TypeOf(1));
  const auto taken = f->set->TakeLagged();
  ASSERT_EQ(taken.size(), 1u);
  ASSERT_TRUE(taken[0].reply.ok()) << taken[0].reply.status().ToString();
  EXPECT_EQ(taken[0].reply->header.type, TypeOf(0));
  EXPECT_GE(f->set->stats().resends, resends_before + 2);
}

// No server lags by more than kMaxLagging requests: with that many lagging,
// the next call waits for the stopped server instead, until it is found
// down; then its request fails there (not lagging) and every lagging one
// fails with it, while the three others answered.
TEST(QuorumExchangeTest, ACallWaitsForAServerLaggingByTheMostAllowed) {
  auto f = QuorumFixture::Make();
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->fs->cluster->Kill(kLaggard, SIGSTOP).ok());
  const Resumed resume{*f->fs->cluster, kLaggard};

  const auto full = f->Ask(ServerSet::kMaxLagging, nullptr);
  for (const auto& a : full) ASSERT_TRUE(a[kLaggard].lagging);
  ASSERT_EQ(f->set->Lagging(kLaggard), ServerSet::kMaxLagging);
  const auto over = f->Ask(1, nullptr);
  ASSERT_EQ(over.size(), 1u);
  for (std::size_t k = 0; k < 3; ++k) EXPECT_TRUE(over[0][k].reply.ok()) << "server " << k;
  EXPECT_FALSE(over[0][kLaggard].lagging);
  EXPECT_TRUE(IsSilence(over[0][kLaggard].reply.status()))
      << over[0][kLaggard].reply.status().ToString();
  EXPECT_EQ(f->set->Lagging(kLaggard), 0u);
  const auto taken = f->set->TakeLagged();
  ASSERT_EQ(taken.size(), ServerSet::kMaxLagging);
  for (const auto& t : taken) EXPECT_FALSE(t.reply.ok());
}

// Two of four stopped: no request can have three answers. Once both are
// found down every request fails, for every server, naming one of them.
TEST(QuorumExchangeTest, WithoutAQuorumEveryRequestFails) {
  auto f = QuorumFixture::Make();
  ASSERT_TRUE(f);
  for (std::size_t i : {std::size_t{2}, kLaggard})
    ASSERT_TRUE(f->fs->cluster->Kill(i, SIGSTOP).ok());
  const Resumed resume2{*f->fs->cluster, 2}, resume3{*f->fs->cluster, kLaggard};
  const auto answers = f->Ask(2, nullptr);
  const std::string& a = f->fs->cluster->endpoints()[2];
  const std::string& b = f->fs->cluster->endpoints()[kLaggard];
  for (std::size_t r = 0; r < answers.size(); ++r) {
    for (std::size_t k = 0; k < 4; ++k) {
      const auto& ans = answers[r][k];
      ASSERT_FALSE(ans.reply.ok()) << "request " << r << ", server " << k;
      EXPECT_FALSE(ans.lagging);
      const std::string& m = ans.reply.status().message();
      EXPECT_TRUE(m.find(a) != std::string::npos || m.find(b) != std::string::npos) << m;
    }
  }
  EXPECT_EQ(f->set->Lagging(kLaggard), 0u);
}

// What the set learns of the link's pace from small exchanges: a round trip
// from one request, and no time per byte from several. Eight small requests
// answered by every server take round trips and the servers' work; divided
// by their few bytes they made a pace of a few hundred KB/s on loopback, by
// which a mount's first 2 MiB root write was expected to take 5 s and a
// killed server was suspected only after 10 s. Checked without a clock: a
// large request is expected to take as long as an empty one (the round
// trip) until a large exchange was timed.
TEST(LinkPaceTest, SmallExchangesOfSeveralRequestsTeachNoTimePerByte) {
  auto f = QuorumFixture::Make();
  ASSERT_TRUE(f);
  // A new set: its first exchange is the pipelined one, as at a mount.
  auto key = LoadCurveKeypair(f->fs->cluster->client_key_file());
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  auto set = NetworkServerSet::Connect(f->fs->cluster->endpoints(),
                                       f->fs->cluster->server_public_keys(), *key);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  std::vector<ServerSet::RequestView> views;
  for (std::size_t r = 0; r < 8; ++r) {
    ++f->header.seq;
    f->frames.emplace_back(4, wire::Encode(f->header, wire::Body{wire::StatusRequest{}}));
    views.push_back({f->header, wire::MessageType::kStatusReply, &f->frames.back()});
  }
  const auto answers =
      (*set)->ExchangeAnswers({0, 1, 2, 3}, views, TransportOptions{}, ServerSet::Wait::kEvery);
  ASSERT_EQ(answers.size(), 8u);
  for (const auto& per_server : answers) {
    for (const auto& a : per_server) ASSERT_TRUE(a.reply.ok()) << a.reply.status().ToString();
  }
  const auto large =
      (*set)->ExpectedTransfer(std::size_t{8} << 20, wire::MessageType::kWriteRootReply);
  const auto empty = (*set)->ExpectedTransfer(0, wire::MessageType::kWriteRootReply);
  EXPECT_EQ(large, empty) << "a time per byte was learned from 8 small requests: 8 MiB expected in "
                          << std::chrono::duration<double>(large).count() << " s";
}

}  // namespace
}  // namespace s3oram

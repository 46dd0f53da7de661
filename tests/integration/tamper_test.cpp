// Lying servers (issue 4): a TamperProxy in front of each of the three real
// servers flips bits in, swaps, or replays from an earlier epoch the RETRIEVE
// answers of one server at a time. Every attacked read must fail (Integrity,
// or Protocol for an answer that is not even a field element) with a log line
// naming the server set (an attacked whole-block write instead replaces the
// block, reporting its old content as zeros); every other read must return
// exactly the model's bytes. Then all servers roll their storage back to an older snapshot
// together (the strongest replay: a consistent old version of the block),
// which the version bound into each sealed block catches.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "tests/integration/cluster_fixture.h"
#include "tests/support/tamper_proxy.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::TamperMode;
using testing::TamperProxy;

// Captures the client's log lines for the duration of a test.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

struct Lab {
  testing::TempDir dir;
  std::unique_ptr<cluster::LocalCluster> cluster;
  std::vector<std::unique_ptr<TamperProxy>> proxies;
  std::string state;
  OramParams params;
};

std::unique_ptr<Lab> MakeLab(const OramParams& params) {
  auto lab = std::make_unique<Lab>();
  lab->cluster = testing::StartCluster(lab->dir.Sub("cluster"));
  if (!lab->cluster) return nullptr;
  FsConfig config;
  config.params = params;
  for (std::size_t i = 0; i < lab->cluster->endpoints().size(); ++i) {
    lab->proxies.push_back(TamperProxy::Start(lab->cluster->endpoints()[i],
                                              lab->cluster->server_public_keys()[i],
                                              lab->cluster->client_key_file()));
    if (!lab->proxies.back()) return nullptr;
    config.servers.push_back(lab->proxies.back()->endpoint());
    config.server_keys.push_back(lab->proxies.back()->public_key());
  }
  config.client_key_file = lab->cluster->client_key_file();
  lab->params = params;
  lab->state = lab->dir.Sub("fs.s3oram");
  Status st = testing::TestInitialize(lab->state, config);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return st.ok() ? std::move(lab) : nullptr;
}

TEST(TamperTest, EveryTamperedAnswerIsDetectedAndNoWrongDataIsReturned) {
  auto lab = MakeLab(testing::SmallParams(256, 8, 6));
  ASSERT_TRUE(lab);
  auto rng = testing::SeededRng();
  const std::uint64_t blocks = 64;
  std::map<BlockId, std::vector<std::uint8_t>> model;
  {
    // Epoch e: honest servers; the proxies record answers for the replay.
    auto c = testing::TestOpen(lab->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (BlockId id = 0; id < blocks; ++id) {
      model[id] = testing::Content(256, id, 0);
      ASSERT_TRUE((*c)->Write(id, model[id]).ok());
    }
  }
  LogCapture log;
  auto c = testing::TestOpen(lab->state, testing::FastRetryOptions());  // epoch e + 1
  ASSERT_TRUE(c.ok()) << c.status().ToString();

  struct Phase {
    TamperMode mode;
    std::size_t server;
    const char* name;
  };
  const Phase phases[] = {{TamperMode::kReplay, 2, "replay from an earlier epoch"},
                          {TamperMode::kBitFlip, 0, "bit flip"},
                          {TamperMode::kSwap, 1, "swapped answer"}};
  constexpr std::uint64_t kPerPhase = 350;  // 3 x 350 >= 1000 injected cases
  std::uint64_t injected = 0, detected = 0, honest_ok = 0, integrity = 0, overwritten = 0,
                own_copy = 0;
  for (const Phase& ph : phases) {
    TamperProxy& proxy = *lab->proxies[ph.server];
    proxy.SetMode(ph.mode, 0.5);
    std::uint64_t phase_injected = 0;
    for (int step = 0; phase_injected < kPerPhase && step < 20 * static_cast<int>(kPerPhase);
         ++step) {
      const BlockId id = rng() % blocks;
      const bool write = rng() % 4 == 0;
      const std::uint64_t before = proxy.tampered();
      std::vector<std::uint8_t> fresh = testing::Content(256, id, rng());
      Result<std::vector<std::uint8_t>> r =
          write ? (*c)->Access(AccessOp::kWrite, id, fresh) : (*c)->Read(id);
      const bool attacked = proxy.tampered() > before;
      if (attacked && r.ok() && *r == model[id] && model[id] != std::vector<std::uint8_t>(256, 0)) {
        // Background eviction: a block the eviction in flight took out of a
        // root slot this round overwrote comes from the client's own copy,
        // and the (tampered) answer of its retrieval selects nothing.
        if (write) model[id] = fresh;
        ++own_copy;
      } else if (attacked && write && r.ok()) {
        // A whole-block write needs nothing of the old copy: it replaces it
        // with a fresh version, and reports the old content as zeros, never
        // as the attacker's bytes.
        ++injected;
        ++phase_injected;
        ++detected;
        ++overwritten;
        ASSERT_EQ(*r, std::vector<std::uint8_t>(256, 0)) << ph.name << ": block " << id;
        model[id] = fresh;
      } else if (attacked) {
        ++injected;
        ++phase_injected;
        // Never data: the access fails, and changes nothing.
        ASSERT_FALSE(r.ok()) << ph.name << ": an attacked access to block " << id
                             << " succeeded";
        const auto code = r.status().code();
        EXPECT_TRUE(code == Status::Code::kIntegrity || code == Status::Code::kProtocol)
            << ph.name << ": " << r.status().ToString();
        integrity += code == Status::Code::kIntegrity;
        ++detected;
      } else {
        ASSERT_TRUE(r.ok()) << ph.name << ": honest access to block " << id << ": "
                            << r.status().ToString();
        ASSERT_EQ(*r, model[id]) << ph.name << ": wrong data for block " << id;
        if (write) model[id] = fresh;
        ++honest_ok;
      }
    }
    proxy.SetMode(TamperMode::kNone, 0);
    EXPECT_GE(phase_injected, kPerPhase) << ph.name;
  }
  std::printf("[ tamper   ] injected %llu, detected %llu (%llu integrity), honest accesses %llu\n",
              static_cast<unsigned long long>(injected), static_cast<unsigned long long>(detected),
              static_cast<unsigned long long>(integrity),
              static_cast<unsigned long long>(honest_ok));
  EXPECT_GE(injected, 1000u);
  EXPECT_EQ(detected, injected);
  EXPECT_GT(integrity + overwritten, injected / 2);  // most lies reach the AEAD check
  std::printf("[ tamper   ] %llu attacked whole-block writes replaced the block; %llu attacked "
              "accesses read their block from the client's own root copy\n",
              static_cast<unsigned long long>(overwritten),
              static_cast<unsigned long long>(own_copy));

  // The failed accesses left the client consistent: every block still reads
  // back exactly, and the log named the server set.
  for (BlockId id = 0; id < blocks; ++id) {
    auto r = (*c)->Read(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(*r, model[id]) << "block " << id;
  }
  const std::string text = log.text();
  EXPECT_NE(text.find("failed authentication"), std::string::npos);
  EXPECT_NE(text.find(lab->proxies[1]->endpoint()), std::string::npos) << "server set not named";
}

// All three servers restore an old copy of their storage together: the block
// the client reads is then a consistent, correctly encrypted, older version
// of itself. Its version no longer matches the position map: EIO, not old data.
// A slow link is not a lost request. Replies held 600 ms by every proxy,
// with resend_after 200 ms: the client learns the link's pace from the
// exchanges at Open, after which it waits at least four times the delay
// before resending, and every access is one retrieval per server. (A fixed
// resend timer sent every request three times.)
TEST(TamperTest, SlowRepliesAreNotResentOnALiveConnection) {
  auto lab = MakeLab(testing::SmallParams(64 * 1024, 4, 3));
  ASSERT_TRUE(lab);
  for (auto& p : lab->proxies) p->SetReplyDelay(std::chrono::milliseconds(600));
  ClientOptions options = testing::FastRetryOptions();
  options.requests.resend_after = std::chrono::milliseconds(200);
  auto c = testing::TestOpen(lab->state, options);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->Write(1, testing::Content(64 * 1024, 1, 1)).ok());  // learns the pace
  // What decides it, checked without a clock: every reply so far took at
  // least 600 ms, so the learned silence before a retrieval is first resent
  // is at least four times that, far above resend_after and above the delay
  // itself. A busier machine only makes the learned pace slower and the
  // silence longer.
  const auto silence = (*c)->server_set().FirstResendSilence(
      0, wire::MessageType::kRetrieveReply, options.requests);
  EXPECT_GE(silence, 4 * std::chrono::milliseconds(600));
  for (auto& p : lab->proxies) p->ClearTranscript();
  const std::uint64_t resends = (*c)->transport_stats().resends;
  constexpr int kAccesses = 6;
  for (int i = 0; i < kAccesses; ++i) {
    auto r = (*c)->Read(1);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, testing::Content(64 * 1024, 1, 1));
  }
  // Printed, not asserted: a reply held past the learned silence by a
  // stalled machine would be resent, and rightly so.
  std::printf("[ resend   ] learned silence %.2f s; %llu resend(s) during %d accesses\n",
              std::chrono::duration<double>(silence).count(),
              static_cast<unsigned long long>((*c)->transport_stats().resends - resends),
              kAccesses);
  // One retrieval per access per server (its resends, same seq, aside).
  for (std::size_t i = 0; i < lab->proxies.size(); ++i) {
    std::set<std::uint64_t> retrievals;
    for (const auto& e : lab->proxies[i]->transcript()) {
      if (e.from_client && (e.type == wire::MessageType::kRetrieveRequest ||
                            e.type == wire::MessageType::kRetrieveWriteRootRequest)) {
        retrievals.insert(e.seq);
      }
    }
    EXPECT_EQ(retrievals.size(), static_cast<std::size_t>(kAccesses)) << "server " << i;
  }
}

TEST(TamperTest, ServersRolledBackTogetherAreDetectedByTheVersion) {
  namespace stdfs = std::filesystem;
  const OramParams params = testing::SmallParams(256, 4, 5);
  auto lab = MakeLab(params);
  ASSERT_TRUE(lab);
  auto c = testing::TestOpen(lab->state, testing::FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const BlockId victim = 5;
  const auto v1 = testing::Content(256, victim, 1), v2 = testing::Content(256, victim, 2);
  // Step until the next access lands in root slot 1, write v1 there, and
  // snapshot every server's storage. Sync after each write sends its
  // (deferred) root write, so the servers and the counters are up to date.
  auto step_to_slot = [&](std::uint64_t slot) {
    for (int i = 0; i < 64 && (*c)->counters().nr != slot; ++i) {
      ASSERT_TRUE((*c)->Write(20 + i % 8, testing::Content(256, 20, i)).ok());
      ASSERT_TRUE((*c)->Sync().ok());
    }
    ASSERT_EQ((*c)->counters().nr, slot);
  };
  step_to_slot(1);
  ASSERT_TRUE((*c)->Write(victim, v1).ok());
  ASSERT_TRUE((*c)->Sync().ok());
  auto snapshot = [&](const std::string& to) {
    for (std::size_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(lab->cluster->Kill(i, SIGTERM).ok());
    }
    stdfs::copy(lab->dir.Sub("cluster"), to,
                stdfs::copy_options::recursive | stdfs::copy_options::overwrite_existing);
    for (std::size_t i = 0; i < 3; ++i) {
      const Status restarted = lab->cluster->Restart(i);
      ASSERT_TRUE(restarted.ok()) << restarted.ToString();
    }
  };
  snapshot(lab->dir.Sub("old"));
  // After at least one eviction, rewrite the victim (v2) into the same root
  // slot: the old storage holds v1 exactly where the position map now says
  // v2 is.
  // (Two rounds: an eviction commits at the end of the round after the one
  // it evicts.)
  step_to_slot(0);
  step_to_slot(1);
  step_to_slot(0);
  step_to_slot(1);
  ASSERT_TRUE((*c)->Write(victim, v2).ok());
  ASSERT_TRUE((*c)->Sync().ok());
  const PositionEntry* where = (*c)->position_map().Find(victim);
  ASSERT_NE(where, nullptr);
  ASSERT_EQ(where->pos.level, 0u);
  ASSERT_EQ(where->pos.slot, 1u);
  ASSERT_EQ(where->version, 2u);
  ASSERT_GE((*c)->counters().ne, 1u);

  // Roll every server back (the data directories only; configs are the same).
  for (std::size_t i = 0; i < 3; ++i) ASSERT_TRUE(lab->cluster->Kill(i, SIGTERM).ok());
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string data = "data-" + std::to_string(i);
    stdfs::remove_all(lab->dir.Sub("cluster/" + data));
    stdfs::copy(lab->dir.Sub("old/" + data), lab->dir.Sub("cluster/" + data),
                stdfs::copy_options::recursive);
  }
  for (std::size_t i = 0; i < 3; ++i) {
    const Status restarted = lab->cluster->Restart(i);
    ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  }

  LogCapture log;
  auto r = (*c)->Read(victim);
  ASSERT_FALSE(r.ok()) << "the rolled-back servers made the client return data";
  EXPECT_EQ(r.status().code(), Status::Code::kIntegrity) << r.status().ToString();
  EXPECT_NE(r.status().message().find("version"), std::string::npos) << r.status().ToString();
  EXPECT_NE(log.text().find("failed authentication"), std::string::npos);
}

}  // namespace
}  // namespace s3oram

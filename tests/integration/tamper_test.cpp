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
#include <thread>
#include <vector>

#include "oramcore/wire/transport.h"
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
        // The failure exposed the block's path: the client reads the block
        // back along it before its next access, whatever that is (SECURITY.md,
        // failed accesses). Let that happen honestly here, so that what the
        // proxy does next is to the next access's own retrieval.
        proxy.SetMode(TamperMode::kNone, 0);
        const BlockId other = (id + 1) % blocks;
        auto settled = (*c)->Read(other);
        ASSERT_TRUE(settled.ok()) << ph.name << ": " << settled.status().ToString();
        ASSERT_EQ(*settled, model[other]) << ph.name << ": block " << other;
        proxy.SetMode(ph.mode, 0.5);
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
  const auto silence =
      dynamic_cast<NetworkServerSet&>((*c)->session().servers())
          .FirstResendSilence(0, wire::MessageType::kRetrieveReply, options.requests);
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

// The retrieval requests (RETRIEVE, RETRIEVE_WRITE_ROOT) a server saw, in order.
std::vector<testing::TranscriptEntry> Retrievals(const TamperProxy& proxy) {
  std::vector<testing::TranscriptEntry> out;
  for (const auto& e : proxy.transcript()) {
    if (e.from_client && (e.type == wire::MessageType::kRetrieveRequest ||
                          e.type == wire::MessageType::kRetrieveWriteRootRequest)) {
      out.push_back(e);
    }
  }
  return out;
}

// Retries reveal nothing (SECURITY.md, failed accesses). A server that makes
// one access fail (here: a bit flipped in its answer) has seen that access's
// path. The client's very next retrieval reads the block back along that
// path and moves it to a fresh leaf, whatever the caller asks next: here a
// read of another block, then the retry. So the repeat follows the failure,
// not the user; the retry itself finds the block at its new place.
TEST(TamperTest, ARetryDoesNotRetrieveThePathThatFailed) {
  auto lab = MakeLab(testing::SmallParams(256, 8, 8));
  ASSERT_TRUE(lab);
  auto c = testing::TestOpen(lab->state, testing::FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const BlockId attacked = 3, other = 5;
  // One round of writes and a sync: both blocks are below the root, and no
  // access of the test is the one that fills the root.
  for (BlockId id = 0; id < 8; ++id) {
    ASSERT_TRUE((*c)->Write(id, testing::Content(256, id, 0)).ok());
  }
  ASSERT_TRUE((*c)->Sync().ok());
  const std::uint64_t version = (*c)->position_map().Find(attacked)->version;
  TamperProxy& liar = *lab->proxies[1];
  for (auto& p : lab->proxies) p->ClearTranscript();

  liar.SetMode(TamperMode::kBitFlip, 1.0);
  auto failed = (*c)->Read(attacked);
  liar.SetMode(TamperMode::kNone, 0);
  ASSERT_FALSE(failed.ok());
  ASSERT_EQ(liar.tampered(), 1u);
  auto seen = Retrievals(liar);
  ASSERT_EQ(seen.size(), 1u);
  const std::uint64_t exposed_leaf = seen[0].leaf;
  EXPECT_EQ((*c)->position_map().Find(attacked)->version, version) << "a failed access moved it";

  for (auto& p : lab->proxies) p->ClearTranscript();
  auto r = (*c)->Read(other);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, testing::Content(256, other, 0));
  // The read-back came first, on every server, along the exposed path, and
  // moved the attacked block: its version is one up before its own retry.
  for (std::size_t s = 0; s < lab->proxies.size(); ++s) {
    seen = Retrievals(*lab->proxies[s]);
    ASSERT_EQ(seen.size(), 2u) << "server " << s;
    EXPECT_EQ(seen[0].leaf, exposed_leaf) << "server " << s;
  }
  EXPECT_EQ((*c)->position_map().Find(attacked)->version, version + 1);

  // The retry: one retrieval, of the block where the read-back put it.
  for (auto& p : lab->proxies) p->ClearTranscript();
  auto retry = (*c)->Read(attacked);
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  EXPECT_EQ(*retry, testing::Content(256, attacked, 0));
  EXPECT_EQ(Retrievals(liar).size(), 1u);
  ASSERT_TRUE((*c)->Sync().ok());  // its root write goes out
  EXPECT_EQ((*c)->position_map().Find(attacked)->version, version + 2);
}

// A server that fails the same path again and again: after the access and
// two read-backs (three retrievals of the path, each the client's first after
// a failure) the block is quarantined. It is not retrieved again by this
// client: reads fail at once, with no message to any server, even once the
// server behaves; a whole-block write replaces it along a random path, after
// which it reads back; a new client (a remount) tries it again.
TEST(TamperTest, APathThatKeepsFailingIsQuarantinedNotRetrievedAgain) {
  auto lab = MakeLab(testing::SmallParams(256, 8, 8));
  ASSERT_TRUE(lab);
  const BlockId attacked = 2;
  {
    auto c = testing::TestOpen(lab->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (BlockId id = 0; id < 8; ++id) {
      ASSERT_TRUE((*c)->Write(id, testing::Content(256, id, 0)).ok());
    }
  }
  auto c = testing::TestOpen(lab->state, testing::FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  TamperProxy& liar = *lab->proxies[0];
  for (auto& p : lab->proxies) p->ClearTranscript();
  liar.SetMode(TamperMode::kBitFlip, 1.0);
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto r = (*c)->Read(attacked);
    ASSERT_FALSE(r.ok()) << "attempt " << attempt;
    EXPECT_EQ(r.status().code(), Status::Code::kIntegrity) << r.status().ToString();
  }
  auto seen = Retrievals(liar);
  ASSERT_EQ(seen.size(), 3u) << "the access and two read-backs";
  EXPECT_EQ(seen[1].leaf, seen[0].leaf);
  EXPECT_EQ(seen[2].leaf, seen[0].leaf);

  // Quarantined: refused without a retrieval, liar or not.
  for (auto& p : lab->proxies) p->ClearTranscript();
  auto r = (*c)->Read(attacked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kIntegrity);
  EXPECT_NE(r.status().message().find("quarantined"), std::string::npos) << r.status().ToString();
  liar.SetMode(TamperMode::kNone, 0);
  r = (*c)->Read(attacked);
  ASSERT_FALSE(r.ok());
  auto u = (*c)->Update(attacked, [](std::span<std::uint8_t> b) { b[0] ^= 1; });
  EXPECT_FALSE(u.ok());
  for (const auto& p : lab->proxies) EXPECT_TRUE(Retrievals(*p).empty());
  // Other blocks are unaffected.
  auto fine = (*c)->Read(attacked + 1);
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_EQ(*fine, testing::Content(256, attacked + 1, 0));

  // A whole write replaces it without reading the old copy.
  const auto fresh = testing::Content(256, attacked, 9);
  ASSERT_TRUE((*c)->Write(attacked, fresh).ok());
  auto back = (*c)->Read(attacked);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, fresh);
}

// The same when a server stays silent instead of lying: an access that
// timed out has shown its path to the servers that did answer, so the
// client's next retrieval, once the server is back, reads the block back
// along that path first.
TEST(TamperTest, AnAccessThatTimedOutIsReadBackBeforeAnythingElse) {
  auto lab = MakeLab(testing::SmallParams(256, 8, 8));
  ASSERT_TRUE(lab);
  ClientOptions options = testing::FastRetryOptions();
  options.requests.deadline = std::chrono::milliseconds(2000);
  auto c = testing::TestOpen(lab->state, options);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const BlockId stalled = 4, other = 6;
  for (BlockId id = 0; id < 8; ++id) {
    ASSERT_TRUE((*c)->Write(id, testing::Content(256, id, 0)).ok());
  }
  ASSERT_TRUE((*c)->Sync().ok());
  for (auto& p : lab->proxies) p->ClearTranscript();
  // Longer than the deadline, however busy the machine: the access fails.
  lab->proxies[2]->SetReplyDelay(std::chrono::milliseconds(5000));
  auto failed = (*c)->Read(stalled);
  lab->proxies[2]->SetReplyDelay(std::chrono::milliseconds(0));
  ASSERT_FALSE(failed.ok());
  auto seen = Retrievals(*lab->proxies[0]);
  ASSERT_FALSE(seen.empty());
  const std::uint64_t exposed_leaf = seen.back().leaf;
  std::this_thread::sleep_for(std::chrono::milliseconds(5500));  // the held reply goes by

  for (auto& p : lab->proxies) p->ClearTranscript();
  auto r = (*c)->Read(other);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, testing::Content(256, other, 0));
  for (std::size_t s = 0; s < 2; ++s) {  // the servers that answered the failed access
    seen = Retrievals(*lab->proxies[s]);
    ASSERT_GE(seen.size(), 2u) << "server " << s;
    EXPECT_EQ(seen.front().leaf, exposed_leaf) << "server " << s;
  }
  auto retry = (*c)->Read(stalled);
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  EXPECT_EQ(*retry, testing::Content(256, stalled, 0));
}

}  // namespace
}  // namespace s3oram

// Issue 24, point 5: a constant-rate mount (-o constant_rate=MS). Watching
// proxies record what each server receives while the mount first works hard
// (files written, fsynced, read back from the servers) and then sits idle.
// From a point the client chooses by itself (the first eviction of each
// window) the two windows must be the same sequence of request types and
// sizes on every server: whether the user works or not does not show in what
// the servers receive. The timing part is the daemon's own schedule: ticks
// are never closer than the period (a lower bound, which a busy machine can
// only raise).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/fs_fixture.h"
#include "tests/integration/watched_servers.h"
#include "tests/support/tamper_proxy.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::FsOptions;
using testing::MountedFs;
using testing::TamperProxy;
using testing::TranscriptEntry;

constexpr int kPeriodMs = 20;
// Requests compared per server and window (about three eviction rounds of
// the test filesystem's 16 accesses).
constexpr std::size_t kCompared = 60;

struct Request {
  wire::MessageType type;
  std::size_t bytes;
  bool operator==(const Request&) const = default;
};

// The requests after the window's first EVICT_PREPARE (inclusive), at most
// kCompared of them; fewer if the window has not reached that far yet.
std::vector<Request> FromFirstEviction(const std::vector<TranscriptEntry>& t) {
  std::vector<Request> out;
  bool started = false;
  for (const auto& e : t) {
    if (!e.from_client) continue;
    started = started || e.type == wire::MessageType::kEvictPrepareRequest;
    if (started && out.size() < kCompared) out.push_back({e.type, e.bytes});
  }
  return out;
}

// Waits (bounded) until every proxy has kCompared requests after a first
// eviction in its transcript since the last ClearTranscript, and returns them.
std::vector<std::vector<Request>> Window(const std::vector<std::unique_ptr<TamperProxy>>& proxies) {
  std::vector<std::vector<Request>> out(proxies.size());
  for (int i = 0; i < 1200; ++i) {  // 120 s at most
    bool all = true;
    for (std::size_t s = 0; s < proxies.size(); ++s) {
      out[s] = FromFirstEviction(proxies[s]->transcript());
      all = all && out[s].size() == kCompared;
    }
    if (all) return out;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "the servers did not see " << kCompared
                << " requests after an eviction within 120 s";
  return out;
}

std::string Describe(const std::vector<Request>& r) {
  std::string s;
  for (const auto& q : r) {
    s += std::string(wire::MessageTypeName(q.type)) + "/" + std::to_string(q.bytes) + " ";
  }
  return s;
}

TEST(FsConstantRateTest, ServersReceiveTheSameWhetherTheUserWorksOrNot) {
  if (!testing::ReferenceDir().empty()) GTEST_SKIP() << "needs the s3oramfs daemon";
  const std::uint64_t seed = testing::TestSeed();
  std::printf("[ seed     ] %llu (file contents)\n", static_cast<unsigned long long>(seed));
  FsOptions o;
  // cache_size=1: reads reach the servers; readahead=0: each read asks for
  // one block (readahead would only take more ticks).
  o.mount_opts = "cache_size=1,readahead=0,constant_rate=" + std::to_string(kPeriodMs);
  auto fs = MountedFs::Create(o);
  ASSERT_TRUE(fs);
  ASSERT_TRUE(fs->Unmount());
  const auto proxies = testing::WatchEveryServer(fs->state(), *fs->test_fs()->cluster);
  ASSERT_EQ(proxies.size(), 3u);
  ASSERT_TRUE(fs->Mount());

  // Busy: files written, fsynced, dropped from the page cache and read back,
  // until the window is recorded (bounded by the iteration count too).
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0};
  std::thread worker([&] {
    for (int i = 0; i < 2000 && !stop; ++i) {
      const std::string name = fs->Path("f" + std::to_string(i % 8));
      const std::string data = testing::PatternBytes(40000 + 4096 * (i % 3), seed + i);
      if (!testing::WriteFile(name, data, 0644, /*do_fsync=*/true)) break;
      int fd = ::open(name.c_str(), O_RDONLY);
      if (fd >= 0) {
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        ::close(fd);
      }
      if (!testing::FileHasContent(name, data)) break;
      rounds = i + 1;
    }
  });
  for (auto& p : proxies) p->ClearTranscript();
  const auto busy = Window(proxies);
  stop = true;
  worker.join();
  EXPECT_GT(rounds.load(), 0) << "the workload did not complete a single round";

  // Idle: nothing asked of the filesystem at all.
  for (auto& p : proxies) p->ClearTranscript();
  const auto idle = Window(proxies);

  for (std::size_t s = 0; s < proxies.size(); ++s) {
    ASSERT_EQ(busy[s].size(), kCompared);
    EXPECT_TRUE(busy[s] == idle[s])
        << "server " << s << " received different requests:\n busy: " << Describe(busy[s])
        << "\n idle: " << Describe(idle[s]);
    const auto retrievals = std::count_if(busy[s].begin(), busy[s].end(), [](const Request& r) {
      return r.type == wire::MessageType::kRetrieveWriteRootRequest ||
             r.type == wire::MessageType::kRetrieveRequest;
    });
    EXPECT_GE(retrievals, static_cast<std::ptrdiff_t>(kCompared / 2)) << Describe(busy[s]);
  }
  ASSERT_TRUE(fs->Unmount());

  // The daemon's own account: real accesses happened, idle ticks were dummy
  // accesses, none went silent, and no two ticks came closer than the period.
  const std::string log = fs->daemon_log();
  // The last mount's line (the first mount, before the proxies, has one too).
  const std::regex line(
      R"(constant rate: (\d+) ticks, (\d+) of them dummy accesses, (\d+) with no access.*shortest time between two ticks ([0-9.]+) ms)");
  std::smatch m;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator();
       ++it) {
    m = *it;
  }
  ASSERT_FALSE(m.empty()) << log;
  const std::uint64_t ticks = std::stoull(m[1]), dummies = std::stoull(m[2]),
                      silent = std::stoull(m[3]);
  const double min_gap = std::stod(m[4]);
  std::printf("[ rate     ] daemon: %llu ticks, %llu dummy, shortest gap %.1f ms (period %d ms)\n",
              static_cast<unsigned long long>(ticks), static_cast<unsigned long long>(dummies),
              min_gap, kPeriodMs);
  EXPECT_GT(ticks, dummies) << "no real access went out";
  EXPECT_GT(dummies, 0u);
  EXPECT_EQ(silent, 0u);
  EXPECT_GE(min_gap, kPeriodMs - 0.05);  // the log rounds to 0.1 ms
}

}  // namespace
}  // namespace s3oram

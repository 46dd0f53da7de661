// LivenessMonitor against a silent server: a CURVE ROUTER on 127.0.0.1 that
// takes every STATUS and never answers (a stopped server's kernel accepts the
// connection just so). A check of it ends in a down verdict; a reply the
// caller heard on its own connection (Heard) ends a check under way and a
// down verdict, so that a check queued behind the client's uploads on a
// saturated home link does not call a server down that is answering.
#include "oramcore/wire/liveness_monitor.h"

#include <gtest/gtest.h>
#include <zmq.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "oramcore/crypto/curve_keys.h"

namespace s3oram {
namespace {

using Clock = std::chrono::steady_clock;

struct SilentServer {
  void* context = zmq_ctx_new();
  void* socket = nullptr;
  std::string endpoint;
  CurveKeypair keys;

  SilentServer() {
    auto k = GenerateCurveKeypair();
    EXPECT_TRUE(k.ok());
    keys = std::move(k).value();
    socket = zmq_socket(context, ZMQ_ROUTER);
    const int server = 1, linger = 0;
    zmq_setsockopt(socket, ZMQ_CURVE_SERVER, &server, sizeof server);
    zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, keys.secret_key.data(), kCurveKeyChars);
    zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
    EXPECT_EQ(zmq_bind(socket, "tcp://127.0.0.1:*"), 0);
    char ep[256];
    size_t len = sizeof ep;
    zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, ep, &len);
    endpoint = ep;
  }
  ~SilentServer() {
    zmq_close(socket);
    zmq_ctx_term(context);
  }
};

struct Client {
  void* context = zmq_ctx_new();
  std::unique_ptr<LivenessMonitor> monitor;
  explicit Client(const SilentServer& s) {
    auto k = GenerateCurveKeypair();
    EXPECT_TRUE(k.ok());
    auto secret = DecodeSecretKey(*k);
    EXPECT_TRUE(secret.ok());
    monitor = std::make_unique<LivenessMonitor>(
        context, std::vector<LivenessMonitor::Target>{{s.endpoint, s.keys.public_key}},
        k->public_key, std::move(secret).value(), /*log=*/false);
  }
  ~Client() {
    monitor.reset();
    zmq_ctx_term(context);
  }
};

// Waits (bounded) until server 0 counts as down.
bool FoundDown(LivenessMonitor& m, std::chrono::seconds within) {
  const auto until = Clock::now() + within;
  while (Clock::now() < until) {
    if (m.Down(0)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(LivenessMonitorTest, ASilentServerIsFoundDownAndAReplyHeardElsewhereEndsTheVerdict) {
  SilentServer server;
  Client client(server);
  LivenessMonitor& m = *client.monitor;
  m.Check(0);
  ASSERT_TRUE(FoundDown(m, std::chrono::seconds(30))) << "a silent server was never found down";
  // A reply on the caller's own connection: it is there.
  m.Heard(0);
  EXPECT_FALSE(m.Down(0).has_value());
  // Fresh for kFreshFor: a check asked now is not sent, so no verdict comes.
  m.Check(0);
  std::this_thread::sleep_for(LivenessMonitor::kMaxCheckDeadline + std::chrono::milliseconds(500));
  EXPECT_FALSE(m.Down(0).has_value()) << "a server heard from was checked and called down";
}

TEST(LivenessMonitorTest, AReplyHeardWhileACheckIsUnderWayEndsTheCheck) {
  SilentServer server;
  Client client(server);
  LivenessMonitor& m = *client.monitor;
  // The STATUS of this check is never answered (a link whose uplink queue
  // holds it longer than the deadline looks the same); the main connection
  // answers meanwhile.
  m.Check(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  m.Heard(0);
  std::this_thread::sleep_for(LivenessMonitor::kMaxCheckDeadline + std::chrono::milliseconds(500));
  EXPECT_FALSE(m.Down(0).has_value()) << "a check outlived a reply heard while it was under way";
  // Past kFreshFor a new check goes out, and with nothing heard it fails.
  std::this_thread::sleep_for(LivenessMonitor::kFreshFor);
  m.Check(0);
  EXPECT_TRUE(FoundDown(m, std::chrono::seconds(30)));
}

}  // namespace
}  // namespace s3oram

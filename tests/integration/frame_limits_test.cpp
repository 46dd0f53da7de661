// Bounded transport (issue 24, docs/SECURITY.md "transport"): what a peer can
// make a server or a client buffer. Real servers, raw ZeroMQ sockets with
// authorized keys (a client key, a peer's key), so the attacks come from
// inside the CURVE perimeter, where the limits matter.
#include <gtest/gtest.h>
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "oramcore/crypto/curve_keys.h"
#include "oramcore/wire/message_limits.h"
#include "oramcore/wire/transport.h"
#include "tests/integration/cluster_fixture.h"

namespace s3oram {
namespace {

// Peak resident memory of process `pid` (VmHWM), in bytes.
std::uint64_t PeakRss(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A raw CURVE socket of `type` with `keys`, connected to `endpoint` (server
// key `server_key`).
struct RawSocket {
  void* context = zmq_ctx_new();
  void* socket = nullptr;
  RawSocket(int type, const CurveKeypair& keys, const std::string& server_key,
            const std::string& endpoint) {
    socket = zmq_socket(context, type);
    auto secret = DecodeSecretKey(keys);
    EXPECT_TRUE(secret.ok());
    const int zero = 0;
    zmq_setsockopt(socket, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, server_key.c_str(), server_key.size() + 1);
    zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, keys.public_key.c_str(),
                   keys.public_key.size() + 1);
    zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, secret->data(), secret->size());
    EXPECT_EQ(zmq_connect(socket, endpoint.c_str()), 0);
  }
  ~RawSocket() {
    zmq_close(socket);
    zmq_ctx_term(context);
  }
};

// An authorized client sends one frame far beyond the largest request of the
// store's shape: the server drops the connection as the frame's length
// arrives, without buffering it (its peak memory stays put), and keeps
// serving. Without the limit it would hold the whole 256 MiB before decoding.
TEST(FrameLimitsTest, AnOversizedRequestIsRefusedWithoutBufferingIt) {
  auto fs = testing::MakeFs(testing::SmallParams(256, 8, 6));
  ASSERT_TRUE(fs);
  const pid_t server = fs->cluster->pid(0);
  // Settle the server (the INIT above re-bound its sockets with the
  // store's limits) with one real access.
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE((*c)->Write(1, testing::Content(256, 1, 1)).ok());
  }
  const std::uint64_t before = PeakRss(server);
  ASSERT_GT(before, 0u);
  auto keys = LoadCurveKeypair(fs->cluster->client_key_file());
  ASSERT_TRUE(keys.ok());
  constexpr std::size_t kHuge = std::size_t{256} << 20;
  {
    RawSocket flood(ZMQ_DEALER, *keys, fs->cluster->server_public_keys()[0],
                    fs->cluster->endpoints()[0]);
    std::vector<std::uint8_t> frame(kHuge, 0x5a);
    ASSERT_EQ(zmq_send(flood.socket, frame.data(), frame.size(), 0), static_cast<int>(kHuge));
    // Long enough for loopback to carry 256 MiB many times over; the check
    // below does not depend on it (a limit that works never buffers).
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  const std::uint64_t after = PeakRss(server);
  std::printf("[ limits   ] server peak RSS %.1f MiB before, %.1f MiB after a %zu MiB frame\n",
              double(before) / (1 << 20), double(after) / (1 << 20), kHuge >> 20);
  EXPECT_LT(after - before, std::uint64_t{32} << 20) << "the server buffered the oversized frame";
  // Still serving.
  auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto r = (*c)->Read(1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, testing::Content(256, 1, 1));
}

// A flood of frames each within the limit: an authorized client pushes 1 GiB
// of 1 MiB frames (under the store's request limit) without ever reading a
// reply, to a server made slow (it takes 20 ms per request). The server's
// memory stays bounded by its queues (64 frames per connection, then TCP's
// backpressure), not by the flood: its peak RSS grows by less than two
// queues' worth, whatever was pushed. Without the receive queue's bound it
// grows with the flood (checked: by 427 MiB in one run).
TEST(FrameLimitsTest, AFloodOfValidSizeFramesIsBoundedByTheQueues) {
  const OramParams params = testing::SmallParams(4096, 8, 8);
  auto fs = testing::MakeFs(params);
  ASSERT_TRUE(fs);
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE((*c)->Write(1, testing::Content(4096, 1, 1)).ok());
  }
  // A slow server (20 ms per request), so that the flood piles up in its
  // queues instead of being answered as fast as it comes. In a sanitizer
  // build, freed frames would wait in AddressSanitizer's quarantine (256 MiB
  // by default), which is not what the queues hold: the server runs without
  // it, so its peak RSS shows the queues alone.
  std::string asan = "ASAN_OPTIONS=";
  if (const char* inherited = std::getenv("ASAN_OPTIONS")) asan += std::string(inherited) + ":";
  asan += "quarantine_size_mb=0";
  ASSERT_TRUE(fs->cluster->Kill(0, SIGTERM).ok());
  ASSERT_TRUE(fs->cluster->Restart(0, {"S3ORAM_FAULT=server.serve~20", asan}).ok());
  const pid_t server = fs->cluster->pid(0);
  const std::uint64_t before = PeakRss(server);
  ASSERT_GT(before, 0u);
  const wire::StoreShape shape{params.height, params.bucket_size,
                               static_cast<std::uint32_t>(params.elems_per_slot())};
  constexpr std::uint64_t frame_bytes = std::uint64_t{1} << 20;
  ASSERT_LT(frame_bytes, wire::LimitsFor(shape, params.parties).request_bytes);
  auto keys = LoadCurveKeypair(fs->cluster->client_key_file());
  ASSERT_TRUE(keys.ok());
  std::uint64_t pushed = 0;
  {
    RawSocket flood(ZMQ_DEALER, *keys, fs->cluster->server_public_keys()[0],
                    fs->cluster->endpoints()[0]);
    // Garbage of a valid size: the server must read each to refuse it.
    std::vector<std::uint8_t> frame(frame_bytes, 0x5a);
    // Bounded by the amount and by time (a slow machine pushes less; the
    // bound below holds either way).
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (pushed < (std::uint64_t{1} << 30) && std::chrono::steady_clock::now() < end) {
      if (zmq_send(flood.socket, frame.data(), frame.size(), ZMQ_DONTWAIT) >= 0) {
        pushed += frame.size();
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }
  const std::uint64_t after = PeakRss(server);
  // What the server may hold: its queue of 64 frames for this connection
  // twice over (ZeroMQ's and the decoder's copies), plus slack for the
  // allocator and TCP buffers.
  const std::uint64_t bound = 2 * 64 * frame_bytes + (std::uint64_t{32} << 20);
  std::printf("[ limits   ] %.1f MiB pushed in frames of %.1f KiB; server peak RSS %.1f MiB "
              "before, %.1f MiB after (bound %.1f MiB)\n",
              double(pushed) / (1 << 20), double(frame_bytes) / 1024, double(before) / (1 << 20),
              double(after) / (1 << 20), double(bound) / (1 << 20));
  EXPECT_LT(after - before, bound);
  // Still serving.
  auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto r = (*c)->Read(1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, testing::Content(4096, 1, 1));
}

// The client's side: a reply larger than the limit it connected with is not
// taken (the exchange fails as with a silent server), one within it is.
TEST(FrameLimitsTest, AClientRefusesRepliesBeyondItsLimit) {
  auto fs = testing::MakeFs(testing::SmallParams(256, 8, 6));
  ASSERT_TRUE(fs);
  auto keys = LoadCurveKeypair(fs->cluster->client_key_file());
  ASSERT_TRUE(keys.ok());
  const wire::Header h = testing::HeaderFromState(fs->state);
  TransportOptions quick = testing::FastRetryOptions().requests;
  quick.deadline = std::chrono::milliseconds(3000);
  auto status = [&](std::uint64_t limit) {
    auto set = NetworkServerSet::Connect({fs->cluster->endpoints()[0]},
                                         {fs->cluster->server_public_keys()[0]}, *keys, limit);
    EXPECT_TRUE(set.ok());
    return (*set)->Exchange({wire::Encode(h, wire::StatusRequest{})}, h,
                            wire::MessageType::kStatusReply, quick);
  };
  EXPECT_TRUE(status(NetworkServerSet::kDefaultMaxReplyBytes).ok());
  // A STATUS reply is well over 64 bytes.
  auto refused = status(64);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kUnavailable) << refused.status().ToString();
}

// Peer 1 as server 0 sees it: a PUSH with peer 1's CURVE key to server 0's
// peer address (from its configuration), made after one access, which a
// server serves only once it has opened its sockets anew with the store's
// limits (after INIT): a frame sent then cannot go to a peer socket that is
// about to be closed.
struct AsPeerOne {
  std::optional<RawSocket> push;
  std::string public_key;
  wire::Header header;

  explicit AsPeerOne(testing::TestFs& fs) {
    const std::string config = ReadAll(fs.cluster->config_path(0));
    std::smatch m;
    const bool found = std::regex_search(config, m, std::regex(R"(peer_listen\s*=\s*"([^"]+)\")"));
    EXPECT_TRUE(found) << config;
    auto peer1 = LoadCurveKeypair(fs.cluster->dir() + "/server-1.key");
    EXPECT_TRUE(peer1.ok()) << peer1.status().ToString();
    if (!found || !peer1.ok()) return;
    auto c = testing::TestOpen(fs.state, testing::FastRetryOptions());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok() || !(*c)->Write(0, testing::Content(256, 0, 1)).ok()) return;
    header = testing::HeaderFromState(fs.state);
    public_key = peer1->public_key;
    push.emplace(ZMQ_PUSH, *peer1, fs.cluster->server_public_keys()[0], std::string(m[1]));
  }
  ::testing::AssertionResult Send(const std::vector<std::uint8_t>& frame) {
    if (!push) return ::testing::AssertionFailure() << "no link as peer 1";
    if (zmq_send(push->socket, frame.data(), frame.size(), 0) != static_cast<int>(frame.size())) {
      return ::testing::AssertionFailure() << "zmq_send: " << zmq_strerror(zmq_errno());
    }
    return ::testing::AssertionSuccess();
  }
};

// Server 0's log once it holds every line of `wanted` (bounded wait: it
// drains its peer socket whenever it is idle; the sending socket stays
// alive meanwhile, so the frames are not discarded).
std::string LogOnceItSays(testing::TestFs& fs, const std::vector<std::string>& wanted) {
  std::string log;
  for (int i = 0; i < 600; ++i) {
    log = ReadAll(fs.cluster->log_path(0));
    if (std::all_of(wanted.begin(), wanted.end(),
                    [&](const std::string& w) { return log.find(w) != std::string::npos; })) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return log;
}

// A peer may speak only for itself: SMP shares sent with peer 1's CURVE key
// that claim to come from peer 2 are dropped and logged, never stored in
// peer 2's place.
TEST(FrameLimitsTest, SmpSharesAreBoundToTheSendersCurveKey) {
  auto fs = testing::MakeFs(testing::SmallParams(256, 8, 6));
  ASSERT_TRUE(fs);
  AsPeerOne peer(*fs);
  ASSERT_TRUE(peer.Send(wire::Encode(
      peer.header, wire::SmpShares{0, 7, 0, /*from_index=*/2, std::vector<field::Elem>(16, 1)})));
  const std::string expected =
      "claim to come from peer 2 but were sent with CURVE key " + peer.public_key;
  const std::string log = LogOnceItSays(*fs, {expected});
  EXPECT_NE(log.find(expected), std::string::npos) << log;
  // And the evictions that follow use only real shares.
  auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (BlockId id = 0; id < 8; ++id) {
    ASSERT_TRUE((*c)->Write(id, testing::Content(256, id, 2)).ok());
  }
  ASSERT_TRUE((*c)->SettleEviction().ok());
  for (BlockId id = 0; id < 8; ++id) {
    auto r = (*c)->Read(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, testing::Content(256, id, 2));
  }
}

// Rebuild terms too: a frame sent with peer 1's CURVE key that claims to
// come from peer 2 is dropped, and one that is peer 1's own but reaches a
// server that is not being rebuilt is dropped as well; neither is kept for
// a rebuild that comes later.
TEST(FrameLimitsTest, RebuildTermsAreBoundToTheSendersCurveKeyAndToARebuild) {
  auto fs = testing::MakeFs(testing::SmallParams(256, 8, 6));
  ASSERT_TRUE(fs);
  AsPeerOne peer(*fs);
  for (std::uint32_t from : {2u, 1u}) {
    ASSERT_TRUE(peer.Send(wire::Encode(
        peer.header, wire::RebuildTerms{0, {}, 1, from, {0}, std::vector<field::Elem>(16, 1)})));
  }
  const std::string forged =
      "rebuild terms that claim to come from peer 2 but were sent with CURVE key " +
      peer.public_key;
  const std::string unasked =
      "dropping rebuild terms from peer 1: this server is not being rebuilt";
  const std::string log = LogOnceItSays(*fs, {forged, unasked});
  EXPECT_NE(log.find(forged), std::string::npos) << log;
  EXPECT_NE(log.find(unasked), std::string::npos) << log;
  // The server goes on serving the filesystem as before.
  auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto r = (*c)->Read(0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, testing::Content(256, 0, 1));
}

}  // namespace
}  // namespace s3oram

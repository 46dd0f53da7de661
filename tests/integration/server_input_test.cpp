// A live s3oram-serverd facing malformed and out-of-range requests: each gets
// an error reply (never a crash, never a changed share), and the filesystem
// keeps working for the real client afterwards.
#include <gtest/gtest.h>
#include <zmq.h>

#include <random>

#include "oramcore/wire/transport.h"
#include "tests/integration/cluster_fixture.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::FastRetryOptions;
using testing::SmallParams;
using testing::StartCluster;
using testing::TempDir;

// Where raw frames go: a server's endpoint and CURVE key, and an authorized
// client key (the links are encrypted; what is tested is the content).
struct RawTarget {
  std::string endpoint;
  std::string server_key;
  std::string client_key_file;
};

// Sends one raw frame on a DEALER socket and returns the raw reply (empty on timeout).
std::vector<std::uint8_t> RawRoundTrip(const RawTarget& target,
                                       const std::vector<std::uint8_t>& frame) {
  void* ctx = zmq_ctx_new();
  void* s = zmq_socket(ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  auto keys = LoadCurveKeypair(target.client_key_file);
  EXPECT_TRUE(keys.ok()) << keys.status().ToString();
  if (keys.ok()) {
    const std::string secret(reinterpret_cast<const char*>(keys->secret_key.data()),
                             keys->secret_key.size());
    zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, target.server_key.c_str(), 41);
    zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, keys->public_key.c_str(), 41);
    zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, secret.c_str(), 41);
  }
  zmq_connect(s, target.endpoint.c_str());
  zmq_send(s, frame.data(), frame.size(), 0);
  zmq_pollitem_t item{s, 0, ZMQ_POLLIN, 0};
  std::vector<std::uint8_t> reply;
  if (zmq_poll(&item, 1, 5000) > 0) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, s, 0) >= 0) {
      auto* d = static_cast<std::uint8_t*>(zmq_msg_data(&msg));
      reply.assign(d, d + zmq_msg_size(&msg));
    }
    zmq_msg_close(&msg);
  }
  zmq_close(s);
  zmq_ctx_term(ctx);
  return reply;
}

// The decoded reply must be an ErrorReply, refused for the reason under test:
// a lease refusal (the default expectation is none) would hide the check.
void ExpectError(const std::vector<std::uint8_t>& reply, const std::string& what,
                 bool lease_refusal = false) {
  ASSERT_FALSE(reply.empty()) << what << ": no reply (server dead or silent)";
  auto m = wire::Decode(reply);
  ASSERT_TRUE(m.ok()) << what << ": undecodable reply";
  const auto* e = std::get_if<wire::ErrorReply>(&m->body);
  ASSERT_NE(e, nullptr) << what << ": not refused";
  EXPECT_EQ(static_cast<Status::Code>(e->code) == Status::Code::kLeaseHeld, lease_refusal)
      << what << ": " << e->message;
}

TEST(ServerInputTest, MalformedAndOutOfRangeRequestsAreRefused) {
  auto fs = testing::MakeFs(SmallParams(128, 4, 4));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  std::vector<std::uint8_t> block(128, 0x5a);
  {
    auto c = testing::TestOpen(state, FastRetryOptions());
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->Write(3, block).ok());
  }
  // This test is the lease holder on server 0, with the next epoch, so the
  // requests below reach the checks they are about.
  wire::Header h = testing::HeaderFromState(state);
  h.epoch += 1;
  const TreeGeometry geo = config.params.geometry();
  const std::size_t m = config.params.elems_per_slot();
  const RawTarget ep{cluster->endpoints()[0], cluster->server_public_keys()[0],
                     cluster->client_key_file()};
  {
    auto granted = wire::Decode(RawRoundTrip(ep, wire::Encode(h, wire::LeaseAcquireRequest{})));
    ASSERT_TRUE(granted.ok());
    ASSERT_TRUE(std::holds_alternative<wire::LeaseReply>(granted->body));
    ASSERT_TRUE(std::get<wire::LeaseReply>(granted->body).granted);
  }

  auto rng = testing::SeededRng();
  // Garbage and truncations of a valid frame.
  wire::RetrieveRequest good;
  good.leaf = geo.first_leaf();
  good.select.assign(geo.path_slots(), 0);
  const auto valid = wire::Encode(h, good);
  for (int i = 0; i < 40; ++i) {
    std::vector<std::uint8_t> junk(rng() % 200);
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
    ExpectError(RawRoundTrip(ep, junk), "random bytes");
  }
  for (std::size_t cut : {std::size_t{0}, std::size_t{10}, wire::kHeaderBytes, valid.size() - 1}) {
    ExpectError(RawRoundTrip(ep, std::vector<std::uint8_t>(valid.begin(), valid.begin() + cut)),
                "truncated at " + std::to_string(cut));
  }
  // Well-formed frames with fields out of range for this store.
  wire::Header other = h;
  other.fs_id[0] ^= 1;
  ExpectError(RawRoundTrip(ep, wire::Encode(other, good)), "another filesystem");
  wire::Header old = h;
  old.epoch = 0;
  ExpectError(RawRoundTrip(ep, wire::Encode(old, good)), "older epoch", /*lease_refusal=*/true);
  wire::RetrieveRequest bad_leaf = good;
  bad_leaf.leaf = geo.first_leaf() - 1;
  ExpectError(RawRoundTrip(ep, wire::Encode(h, bad_leaf)), "internal bucket as leaf");
  bad_leaf.leaf = geo.first_leaf() << 1;
  ExpectError(RawRoundTrip(ep, wire::Encode(h, bad_leaf)), "leaf past the tree");
  wire::RetrieveRequest short_select = good;
  short_select.select.pop_back();
  ExpectError(RawRoundTrip(ep, wire::Encode(h, short_select)), "short select vector");
  wire::WriteRootRequest bad_slot;
  bad_slot.slot = config.params.bucket_size;
  bad_slot.share.assign(m, 1);
  ExpectError(RawRoundTrip(ep, wire::Encode(h, bad_slot)), "slot past Z");
  wire::WriteRootRequest short_share;
  short_share.share.assign(m - 1, 1);
  ExpectError(RawRoundTrip(ep, wire::Encode(h, short_share)), "short share");
  wire::EvictPrepareRequest wrong_leaf;
  wrong_leaf.eviction = 0;
  wrong_leaf.leaf = geo.EvictionLeaf(1);
  wrong_leaf.matrices.assign((geo.height + 1) * 2 * geo.bucket_size * geo.bucket_size, 0);
  ExpectError(RawRoundTrip(ep, wire::Encode(h, wrong_leaf)), "eviction leaf not on schedule");
  wire::EvictPrepareRequest future;
  future.eviction = 7;
  future.leaf = geo.EvictionLeaf(7);
  ExpectError(RawRoundTrip(ep, wire::Encode(h, future)), "eviction from the future");
  ExpectError(RawRoundTrip(ep, wire::Encode(h, wire::EvictCommitRequest{0})),
              "commit without a prepared shadow");
  wire::InitRequest reinit;
  reinit.server_index = 0;
  reinit.shape = wire::StoreShape{geo.height, geo.bucket_size, static_cast<std::uint32_t>(m)};
  wire::Header stranger = h;
  stranger.fs_id[5] ^= 0xff;
  ExpectError(RawRoundTrip(ep, wire::Encode(stranger, reinit)), "init over another filesystem");
  ExpectError(RawRoundTrip(ep, wire::Encode(h, wire::SmpShares{})), "peer message on client port");
  ASSERT_FALSE(RawRoundTrip(ep, wire::Encode(h, wire::LeaseReleaseRequest{})).empty());
  // The requests above came from this state's client, in its newest epoch
  // (otherwise the state is rightly refused as stale).
  {
    auto st = testing::TestOpenStore(state);
    ASSERT_TRUE(st.ok());
    Counters counters = (*st)->counters();
    counters.epoch = h.epoch;
    ClientStateStore::Batch b;
    b.SetCounters(counters);
    ASSERT_TRUE((*st)->Commit(b, true).ok());
  }

  // Nothing above changed the store: the client still reads its block.
  auto c = testing::TestOpen(state, FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto r = (*c)->Read(3);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value(), block);
}

}  // namespace
}  // namespace s3oram

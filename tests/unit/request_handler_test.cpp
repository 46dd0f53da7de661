// RequestHandler in process (no sockets): a real ShareStore in a temp dir and
// stub peers for the SMP rounds. Covers the checks that the fuzz harness
// fuzz/server_handler_fuzz.cpp found or relies on; the request flow over real
// sockets is covered by the integration tests.
#include "serverd/request_handler.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/tree/geometry.h"
#include "oramcore/wire/wire.h"
#include "tests/support/temp_dir.h"

namespace s3oram::serverd {
namespace {

using field::Elem;

using testing::TempDir;

// Peers 1 and 2: each answers with what it was sent, optionally one share short.
class StubPeers final : public PeerExchange {
 public:
  bool short_shares = false;

  // Echoes to the server the shares it sent peers 1 and 2 (decoded from
  // their frames, which must be well-formed SMP_SHARES from party 0).
  Status Send(const std::vector<std::vector<std::uint8_t>>& frames) override {
    if (frames.size() != 3 || !frames[0].empty()) {
      return Status::Protocol("stub: expected frames for parties 1 and 2 only");
    }
    for (std::size_t p = 1; p < 3; ++p) {
      wire::Header h;
      wire::SmpShares m;
      S3ORAM_RETURN_IF_ERROR(wire::DecodeSmpSharesInto(frames[p], &h, &m));
      if (m.from_index != 0) return Status::Protocol("stub: from_index is not 0");
      answers_[p - 1] = std::move(m.shares);
    }
    if (short_shares) answers_[1].pop_back();
    return Status::Ok();
  }
  Result<std::vector<std::span<const Elem>>> Await(const SmpRound&) override {
    return std::vector<std::span<const Elem>>{answers_[0], answers_[1]};
  }
  void Release(const SmpRound&) override {}
  void Reset() override {}
  std::uint64_t bytes_sent() const override { return 0; }
  // These tests drive no rebuild.
  Status SendTerms(std::uint32_t, std::span<const std::uint8_t>) override {
    return Status::Unavailable("stub: no rebuild link");
  }
  Result<std::vector<std::vector<Elem>>> AwaitTerms(const serverd::TermsWanted&) override {
    return Status::Unavailable("stub: no rebuild link");
  }

 private:
  std::vector<Elem> answers_[2];
};

class RequestHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.index = 0;
    config_.listen = "tcp://127.0.0.1:1";
    config_.peer_listen = "tcp://127.0.0.1:2";
    config_.data_dir = dir_.path() + "/data";
    config_.threads = 1;
    config_.sync = false;
    config_.peers = {{1, "tcp://127.0.0.1:3", ""}, {2, "tcp://127.0.0.1:4", ""}};
    auto h = RequestHandler::Create(config_, peers_);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    handler_ = std::move(h).value();
  }

  wire::Header Hdr(std::uint64_t seq) const {
    wire::Header h;
    h.fs_id = fs_id_;
    h.epoch = epoch_;
    h.seq = seq;
    return h;
  }
  // Takes the lease as `epoch` (requests then carry it).
  wire::LeaseReply Acquire(std::uint64_t epoch, bool force = false, std::string holder = "h") {
    epoch_ = epoch;
    wire::Body b = Call(wire::LeaseAcquireRequest{force, std::move(holder)}, 100 + epoch);
    const auto* r = std::get_if<wire::LeaseReply>(&b);
    EXPECT_NE(r, nullptr) << ErrorText(b);
    return r ? *r : wire::LeaseReply{};
  }
  void Reopen() {
    handler_.reset();
    auto h = RequestHandler::Create(config_, peers_);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    handler_ = std::move(h).value();
  }
  wire::WriteRootRequest RootWrite() const {
    return wire::WriteRootRequest{
        0, std::vector<Elem>(handler_->store()->tree().slot_elems(), 7), {}};
  }
  // Sends one request and returns the decoded reply body.
  wire::Body Call(const wire::Body& body, std::uint64_t seq = 1) {
    auto reply = wire::Decode(handler_->Handle(wire::Encode(Hdr(seq), body)));
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    if (!reply.ok()) return wire::ErrorReply{};
    EXPECT_EQ(reply->header.seq, seq);
    return reply->body;
  }
  static std::string ErrorText(const wire::Body& b) {
    const auto* e = std::get_if<wire::ErrorReply>(&b);
    return e ? e->message : "";
  }
  bool SharesFileExists() const { return std::filesystem::exists(config_.data_dir + "/shares.bin"); }

  TempDir dir_;
  ServerConfig config_;
  StubPeers peers_;
  std::unique_ptr<RequestHandler> handler_;
  std::uint64_t epoch_ = 1;
  wire::FsId fs_id_{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
};

// Found while writing fuzz/server_handler_fuzz: INIT accepted any shape with
// H <= 40, Z <= 2^16, m <= 2^24, e.g. Z = 2^16, m = 2^24, whose buckets are
// 2^40 elements; the next RETRIEVE then sized a (H+1)-bucket buffer from it
// (std::bad_alloc, or the OOM killer). No client can use such a shape: its
// messages exceed the wire limit, which ValidateParams enforces on the client.
TEST_F(RequestHandlerTest, InitRefusesShapesBeyondTheWireLimit) {
  const wire::StoreShape refused[] = {
      {1, 1u << 16, 1u << 24},  // 2 Z m = 2^41 elements
      {1, 32, 1u << 23},        // 2 Z m = 2^29
      {1, 8193, 1},             // (H+1) 2 Z^2 just above 2^28
      {40, 4096, 1},            // (H+1) 2 Z^2 = 41 * 2^25
  };
  for (const auto& s : refused) {
    const wire::Body reply = Call(wire::InitRequest{0, s, false});
    EXPECT_NE(ErrorText(reply).find("beyond the wire limit"), std::string::npos)
        << "H=" << s.height << " Z=" << s.bucket_size << " m=" << s.elems_per_slot;
    EXPECT_FALSE(SharesFileExists());
    EXPECT_EQ(handler_->store(), nullptr);
  }
  // The largest Z one level allows: (H+1) 2 Z^2 = 2 * 2 * 8192^2 = 2^28 exactly.
  const wire::Body ok = Call(wire::InitRequest{0, {1, 8192, 1}, false});
  EXPECT_TRUE(std::holds_alternative<wire::InitReply>(ok)) << ErrorText(ok);
  ASSERT_NE(handler_->store(), nullptr);
  EXPECT_EQ(handler_->store()->meta().shape, (wire::StoreShape{1, 8192, 1}));
}

// The handler checks every peer's share count before SmpCombine reads
// product.size() elements from it (a hostile or broken peer exchange).
TEST_F(RequestHandlerTest, PrepareRefusesPeerSharesOfTheWrongLength) {
  const wire::StoreShape shape{2, 2, 4};
  ASSERT_TRUE(std::holds_alternative<wire::InitReply>(Call(wire::InitRequest{0, shape, false})));
  ASSERT_TRUE(Acquire(2).granted);
  const TreeGeometry geo{shape.height, shape.bucket_size};
  wire::EvictPrepareRequest prepare{
      0, 0, geo.EvictionLeaf(0), std::vector<Elem>((shape.height + 1) * 2 * 2 * 2, 1), {}};
  peers_.short_shares = true;
  // The PREPARE starts (EVICT_STARTED); its outcome is EVICT_RESULT's reply.
  ASSERT_TRUE(std::holds_alternative<wire::EvictStartedReply>(Call(prepare, 2)));
  const wire::Body refused = Call(wire::EvictResultRequest{0, 0}, 2);
  EXPECT_NE(ErrorText(refused).find("peer 2 sent 7 SMP shares for round 0, expected 8"),
            std::string::npos)
      << ErrorText(refused);
  EXPECT_EQ(handler_->store()->shadow().SealedEviction(), 0u);

  peers_.short_shares = false;
  prepare.attempt = 1;
  ASSERT_TRUE(std::holds_alternative<wire::EvictStartedReply>(Call(prepare, 3)));
  const wire::Body accepted = Call(wire::EvictResultRequest{0, 1}, 3);
  ASSERT_TRUE(std::holds_alternative<wire::EvictPrepareReply>(accepted)) << ErrorText(accepted);
  EXPECT_EQ(handler_->store()->shadow().SealedEviction(), 1u);
}

// EVICT_PREPARE copies the root aside before it answers (EVICT_STARTED): a
// root write that follows changes only the live root, and the eviction
// (computed here at EVICT_RESULT, after that write) reads the root as it was.
// Step 1 copies the root into the upper sibling s_1 unchanged, so the
// committed s_1 shows which root the eviction read.
TEST_F(RequestHandlerTest, PrepareEvictsTheRootAsItWasWhenItStarted) {
  const wire::StoreShape shape{2, 2, 4};
  ASSERT_TRUE(std::holds_alternative<wire::InitReply>(Call(wire::InitRequest{0, shape, false})));
  ASSERT_TRUE(Acquire(2).granted);
  const TreeGeometry geo{shape.height, shape.bucket_size};
  const std::vector<Elem> before{11, 12, 13, 14}, after{21, 22, 23, 24};
  ASSERT_TRUE(
      std::holds_alternative<wire::WriteRootReply>(Call(wire::WriteRootRequest{0, before, {}}, 2)));
  const LeafId leaf = geo.EvictionLeaf(0);
  const wire::EvictPrepareRequest prepare{
      0, 1, leaf, std::vector<Elem>((shape.height + 1) * 2 * 2 * 2, 1), {}};
  const wire::Body started = Call(prepare, 3);
  ASSERT_TRUE(std::holds_alternative<wire::EvictStartedReply>(started)) << ErrorText(started);
  EXPECT_EQ(handler_->store()->shadow().RootSnapshotEviction(), 1u);
  ASSERT_TRUE(
      std::holds_alternative<wire::WriteRootReply>(Call(wire::WriteRootRequest{0, after, {}}, 4)));
  const wire::Body done = Call(wire::EvictResultRequest{0, 1}, 5);
  ASSERT_TRUE(std::holds_alternative<wire::EvictPrepareReply>(done)) << ErrorText(done);
  // A duplicate PREPARE of the same attempt is answered, not run again.
  EXPECT_TRUE(std::holds_alternative<wire::EvictStartedReply>(Call(prepare, 3)));
  // EVICT_RESULT of an attempt never started says so.
  EXPECT_NE(ErrorText(Call(wire::EvictResultRequest{0, 9}, 6)).find("prepare it again"),
            std::string::npos);
  ASSERT_TRUE(std::holds_alternative<wire::EvictCommitReply>(Call(wire::EvictCommitRequest{0}, 7)));
  const std::uint64_t s1 = TreeGeometry::Sibling(geo.BucketOnPath(leaf, 1));
  const Elem* sibling = handler_->store()->tree().Bucket(s1);
  EXPECT_EQ(std::vector<Elem>(sibling, sibling + 4), before);
  const Elem* root = handler_->store()->tree().Bucket(1);
  EXPECT_EQ(std::vector<Elem>(root, root + 4), after);
}

// The single-writer lease: granted when free, refused (naming the holder) to
// another epoch unless forced, and only the holder may touch the tree.
TEST_F(RequestHandlerTest, LeaseAdmitsOneWriterAndFencesTheOneTakenOver) {
  ASSERT_TRUE(std::holds_alternative<wire::InitReply>(
      Call(wire::InitRequest{0, wire::StoreShape{2, 2, 4}, false})));
  // Nobody holds it yet: no access is served.
  EXPECT_NE(ErrorText(Call(RootWrite(), 2)).find("no client holds"), std::string::npos);

  const wire::LeaseReply first = Acquire(5, false, "holder five");
  EXPECT_TRUE(first.granted);
  EXPECT_EQ(first.holder_epoch, 5u);
  EXPECT_TRUE(std::holds_alternative<wire::WriteRootReply>(Call(RootWrite(), 3)));
  EXPECT_TRUE(Acquire(5, false, "holder five").granted);  // a resend or a renewal

  const wire::LeaseReply refused = Acquire(6, false, "holder six");
  EXPECT_FALSE(refused.granted);
  EXPECT_EQ(refused.holder_epoch, 5u);
  EXPECT_EQ(refused.holder, "holder five");
  // The refused client changed nothing: the holder goes on.
  epoch_ = 5;
  EXPECT_TRUE(std::holds_alternative<wire::WriteRootReply>(Call(RootWrite(), 4)));

  // A server restart keeps the lease (it is on disk).
  Reopen();
  EXPECT_FALSE(Acquire(7).granted);
  epoch_ = 5;
  EXPECT_TRUE(std::holds_alternative<wire::WriteRootReply>(Call(RootWrite(), 5)));

  // Forced takeover: epoch 8 holds it, epoch 5 is fenced from every access.
  const wire::LeaseReply forced = Acquire(8, true, "holder eight");
  EXPECT_TRUE(forced.granted);
  EXPECT_EQ(forced.holder, "holder eight");
  epoch_ = 5;
  const wire::Body fenced = Call(RootWrite(), 6);
  EXPECT_NE(ErrorText(fenced).find("fenced"), std::string::npos) << ErrorText(fenced);
  const auto* err = std::get_if<wire::ErrorReply>(&fenced);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(static_cast<Status::Code>(err->code), Status::Code::kLeaseHeld);
  // ... and cannot take it back with its old epoch, forced or not.
  EXPECT_NE(ErrorText(Call(wire::LeaseAcquireRequest{true, "again"}, 7)).find("stale epoch"),
            std::string::npos);
  // Releasing with the wrong epoch does nothing; the holder's release frees it.
  EXPECT_EQ(std::get<wire::LeaseReply>(Call(wire::LeaseReleaseRequest{}, 8)).holder_epoch, 8u);
  epoch_ = 8;
  EXPECT_EQ(std::get<wire::LeaseReply>(Call(wire::LeaseReleaseRequest{}, 9)).holder_epoch, 0u);
  EXPECT_NE(ErrorText(Call(RootWrite(), 10)).find("no client holds"), std::string::npos);
  // A released lease still remembers the highest epoch granted: epochs never repeat.
  epoch_ = 7;
  EXPECT_NE(ErrorText(Call(wire::LeaseAcquireRequest{false, "seven"}, 11)).find("stale epoch"),
            std::string::npos);
  EXPECT_EQ(std::get<wire::LeaseReply>(Call(wire::LeaseQueryRequest{}, 12)).highest_epoch, 8u);
  Reopen();
  EXPECT_EQ(std::get<wire::LeaseReply>(Call(wire::LeaseQueryRequest{}, 13)).highest_epoch, 8u);
  EXPECT_TRUE(Acquire(9).granted);
}

TEST_F(RequestHandlerTest, DamagedLeaseRecordStopsTheServerInsteadOfForgettingTheHolder) {
  ASSERT_TRUE(std::holds_alternative<wire::InitReply>(
      Call(wire::InitRequest{0, wire::StoreShape{2, 2, 4}, false})));
  ASSERT_TRUE(Acquire(3).granted);
  {
    std::FILE* f = std::fopen((config_.data_dir + "/lease").c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 9, SEEK_SET);
    std::fputc(0x55, f);
    std::fclose(f);
  }
  handler_.reset();
  auto h = RequestHandler::Create(config_, peers_);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("lease record"), std::string::npos) << h.status().ToString();
}

// Client-state backup frames: every malformed one gets an ErrorReply that
// says why, and nothing it carries is stored.
TEST_F(RequestHandlerTest, MalformedBackupRequestsGetErrorReplies) {
  // Before INIT there is no filesystem to back up.
  EXPECT_NE(ErrorText(Call(wire::BackupListRequest{})).find("holds no filesystem"),
            std::string::npos);
  EXPECT_NE(ErrorText(Call(wire::BackupPutRequest{1, 0, 1, true, {7}})).find("no filesystem"),
            std::string::npos);
  ASSERT_TRUE(std::holds_alternative<wire::InitReply>(
      Call(wire::InitRequest{0, {2, 2, 4}, false})));
  const std::vector<Elem> chunk(8, 5);
  struct Case {
    wire::BackupPutRequest put;
    const char* why;
  };
  const Case cases[] = {
      {{0, 0, 8, true, chunk}, "generation 0"},
      {{1, 0, 0, true, {}}, "size 0"},
      {{1, 0, wire::kMaxBackupElems + 1, false, chunk}, "is not in [1,"},
      {{1, 0, 8, true, {}}, "a chunk carries 1 to"},
      {{1, 4, 8, true, chunk}, "runs past its size"},
      {{1, 0, 16, true, chunk}, "the last chunk, and only it"},
      {{1, 0, 8, false, chunk}, "the last chunk, and only it"},
      {{1, 8, 16, true, chunk}, "no upload of this generation"},
  };
  std::uint64_t seq = 2;
  for (const auto& c : cases) {
    const wire::Body reply = Call(c.put, seq++);
    EXPECT_NE(ErrorText(reply).find(c.why), std::string::npos)
        << "expected \"" << c.why << "\", got \"" << ErrorText(reply) << "\"";
  }
  // A chunk larger than the per-frame cap.
  const wire::Body big = Call(
      wire::BackupPutRequest{1, 0, wire::kMaxBackupChunkElems + 1, true,
                             std::vector<Elem>(wire::kMaxBackupChunkElems + 1, 0)},
      seq++);
  EXPECT_NE(ErrorText(big).find("a chunk carries 1 to"), std::string::npos) << ErrorText(big);
  auto list = Call(wire::BackupListRequest{}, seq++);
  ASSERT_TRUE(std::holds_alternative<wire::BackupListReply>(list)) << ErrorText(list);
  EXPECT_TRUE(std::get<wire::BackupListReply>(list).backups.empty());

  // Fencing: while epoch 5 holds the lease, an upload from another epoch is refused.
  ASSERT_TRUE(Acquire(5).granted);
  {
    wire::Header old = Hdr(seq++);
    old.epoch = 1;
    auto stale = wire::Decode(
        handler_->Handle(wire::Encode(old, wire::BackupPutRequest{1, 0, 8, true, chunk})));
    ASSERT_TRUE(stale.ok());
    EXPECT_NE(ErrorText(stale->body).find("fenced"), std::string::npos) << ErrorText(stale->body);
  }
  // Another filesystem's backup requests.
  {
    wire::Header h = Hdr(seq++);
    h.fs_id[0] ^= 1;
    auto r = wire::Decode(handler_->Handle(wire::Encode(h, wire::BackupGetRequest{1, 0, 8})));
    ASSERT_TRUE(r.ok());
    EXPECT_NE(ErrorText(r->body).find("but this server holds"), std::string::npos);
  }
  // GET of a missing generation, and reads out of range.
  EXPECT_NE(ErrorText(Call(wire::BackupGetRequest{1, 0, 8}, seq++)).find("not stored"),
            std::string::npos);
  // A truncated BACKUP_PUT frame (the codec's bounds checks).
  {
    wire::Header h = Hdr(seq++);
    h.epoch = 5;
    const auto full = wire::Encode(h, wire::BackupPutRequest{1, 0, 8, true, chunk});
    ASSERT_GT(full.size(), 3u);
    const std::vector<std::uint8_t> frame(full.begin(), full.end() - 3);
    auto r = wire::Decode(handler_->Handle(frame));
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(std::holds_alternative<wire::ErrorReply>(r->body));
    EXPECT_EQ(r->header.seq, h.seq);
  }
  // A valid upload, then reads past its end or of a bad count.
  wire::Header h = Hdr(seq++);
  h.epoch = 5;
  auto ok = wire::Decode(
      handler_->Handle(wire::Encode(h, wire::BackupPutRequest{1, 0, 8, true, chunk})));
  ASSERT_TRUE(ok.ok());
  ASSERT_TRUE(std::holds_alternative<wire::BackupPutReply>(ok->body)) << ErrorText(ok->body);
  EXPECT_NE(ErrorText(Call(wire::BackupGetRequest{1, 9, 1}, seq++)).find("past its size"),
            std::string::npos);
  EXPECT_NE(ErrorText(Call(wire::BackupGetRequest{1, 0, 0}, seq++)).find("a read returns"),
            std::string::npos);
  const wire::Body got = Call(wire::BackupGetRequest{1, 2, 100}, seq++);
  ASSERT_TRUE(std::holds_alternative<wire::BackupGetReply>(got)) << ErrorText(got);
  EXPECT_EQ(std::get<wire::BackupGetReply>(got).shares, std::vector<Elem>(6, 5));
  EXPECT_EQ(std::get<wire::BackupGetReply>(got).total, 8u);
  // A second generation may not reuse or go below the stored one.
  h.seq = seq++;
  auto again = wire::Decode(
      handler_->Handle(wire::Encode(h, wire::BackupPutRequest{1, 0, 4, true, {1, 2, 3, 4}})));
  ASSERT_TRUE(again.ok());
  EXPECT_NE(ErrorText(again->body).find("already stored"), std::string::npos);
  // The share file is never touched by backups.
  EXPECT_TRUE(SharesFileExists());
}

TEST(RequestHandlerCreate, RefusesRepeatedOrOwnPeerIndices) {
  TempDir dir;
  StubPeers peers;
  ServerConfig c;
  c.index = 0;
  c.data_dir = dir.path();
  c.threads = 1;
  c.peers = {{1, "tcp://127.0.0.1:3", ""}, {1, "tcp://127.0.0.1:4", ""}};
  EXPECT_EQ(RequestHandler::Create(c, peers).status().code(), Status::Code::kInvalidArgument);
  c.peers = {{0, "tcp://127.0.0.1:3", ""}, {2, "tcp://127.0.0.1:4", ""}};
  EXPECT_EQ(RequestHandler::Create(c, peers).status().code(), Status::Code::kInvalidArgument);
  c.peers = {{1, "tcp://127.0.0.1:3", ""}, {2, "tcp://127.0.0.1:4", ""}};
  EXPECT_TRUE(RequestHandler::Create(c, peers).ok());
}

// Beside an eviction's PREPARE a server serves rebuild reads of live
// buckets (a mount catches a server up while its evictions go on), but not
// of bucket 0, the root snapshot the PREPARE writes, nor any rebuild write
// or commit.
TEST(RequestHandlerDuringPrepare, ServesRebuildReadsOfLiveBucketsOnly) {
  wire::Header h;
  h.seq = 1;
  wire::RebuildReadRequest read;
  read.target = 3;
  read.participants = {0, 1};
  read.first_bucket = 5;
  read.count = 2;
  EXPECT_TRUE(RequestHandler::ServedDuringPrepare(wire::Encode(h, read)));
  read.first_bucket = 0;
  read.count = 1;
  EXPECT_FALSE(RequestHandler::ServedDuringPrepare(wire::Encode(h, read)));
  EXPECT_FALSE(RequestHandler::ServedDuringPrepare(
      wire::Encode(h, wire::RebuildWriteRequest{5, {0}, {{}, {}}})));
  EXPECT_FALSE(RequestHandler::ServedDuringPrepare(wire::Encode(h, wire::EvictCommitRequest{3})));
  EXPECT_TRUE(RequestHandler::ServedDuringPrepare(wire::Encode(h, wire::StatusRequest{})));
  // An undecodable rebuild read is not admitted (it waits, then is refused).
  auto frame = wire::Encode(h, wire::RebuildReadRequest{});
  frame.resize(frame.size() - 1);
  EXPECT_FALSE(RequestHandler::ServedDuringPrepare(frame));
}

// STATS counts what the server did, per kind of request, and is served to a
// client that does not hold the lease (like STATUS) without changing anything.
TEST_F(RequestHandlerTest, StatsCountsRequestsByKind) {
  const wire::StoreShape shape{2, 2, 4};
  ASSERT_TRUE(std::holds_alternative<wire::InitReply>(Call(wire::InitRequest{0, shape, false})));
  ASSERT_TRUE(Acquire(2).granted);
  const TreeGeometry geo{shape.height, shape.bucket_size};
  ASSERT_TRUE(std::holds_alternative<wire::WriteRootReply>(Call(RootWrite(), 2)));
  const wire::Body retrieved =
      Call(wire::RetrieveRequest{geo.first_leaf(), std::vector<Elem>(geo.path_slots(), 1), {}}, 3);
  ASSERT_TRUE(std::holds_alternative<wire::RetrieveReply>(retrieved)) << ErrorText(retrieved);
  wire::EvictPrepareRequest prepare{
      0, 1, geo.EvictionLeaf(0), std::vector<Elem>((shape.height + 1) * 2 * 2 * 2, 1), {}};
  ASSERT_TRUE(std::holds_alternative<wire::EvictStartedReply>(Call(prepare, 4)));
  ASSERT_TRUE(std::holds_alternative<wire::EvictPrepareReply>(Call(wire::EvictResultRequest{0, 1}, 4)));
  ASSERT_TRUE(std::holds_alternative<wire::EvictCommitReply>(Call(wire::EvictCommitRequest{0}, 5)));
  // A refused request still counts as a request, not as a root write.
  epoch_ = 1;
  EXPECT_FALSE(ErrorText(Call(RootWrite(), 6)).empty());

  const wire::Body got = Call(wire::StatsRequest{}, 7);
  ASSERT_TRUE(std::holds_alternative<wire::StatsReply>(got)) << ErrorText(got);
  const auto& s = std::get<wire::StatsReply>(got);
  EXPECT_EQ(s.requests, 8u);  // init, lease, root write, retrieve, prepare, result, commit, refused write
  EXPECT_EQ(s.root_writes, 1u);
  EXPECT_EQ(s.retrieves, 1u);
  EXPECT_EQ(s.prepares, 1u);
  EXPECT_EQ(s.commits, 1u);
  EXPECT_GE(s.busy_us, s.root_write_us + s.retrieve_read_us + s.retrieve_kernel_us);
  EXPECT_EQ(handler_->store()->meta().applied_evictions, 1u);
  const wire::Body again = Call(wire::StatsRequest{}, 8);
  ASSERT_TRUE(std::holds_alternative<wire::StatsReply>(again));
  EXPECT_EQ(std::get<wire::StatsReply>(again).requests, 9u);
}

// RETRIEVE_WRITE_ROOT: the root write lands before the retrieval (which sees
// it), and a request whose either part is malformed changes nothing.
// Buckets never written are holes of the share file; the retrieval leaves
// them out (they would add zeros), and the answer is the inner product over
// the whole path all the same. Slots of 4 KiB, so buckets fill whole
// filesystem blocks and the lower levels really are holes.
TEST_F(RequestHandlerTest, RetrievalOverHolesEqualsTheWholePathProduct) {
  const wire::StoreShape shape{2, 2, 1024};
  ASSERT_TRUE(std::holds_alternative<wire::InitReply>(Call(wire::InitRequest{0, shape, false})));
  ASSERT_TRUE(Acquire(2).granted);
  const TreeGeometry geo{shape.height, shape.bucket_size};
  std::vector<Elem> share(shape.elems_per_slot);
  for (std::size_t i = 0; i < share.size(); ++i) share[i] = static_cast<Elem>(1 + 7919 * i % 100003);
  std::vector<Elem> select(geo.path_slots());
  for (std::size_t i = 0; i < select.size(); ++i) select[i] = static_cast<Elem>(3 + 104729 * i % 65521);
  // Root slot 1 holds `share`; every other slot of the path was never written.
  wire::Body got =
      Call(wire::RetrieveWriteRootRequest{1, share, geo.first_leaf(), select, {}, {}}, 3);
  ASSERT_TRUE(std::holds_alternative<wire::RetrieveReply>(got)) << ErrorText(got);
  std::vector<Elem> want(share.size());
  for (std::size_t c = 0; c < share.size(); ++c) {
    want[c] = static_cast<Elem>(std::uint64_t{select[1]} * share[c] % field::kPrime);
  }
  EXPECT_EQ(std::get<wire::RetrieveReply>(got).answer, want);
  auto holes = handler_->store()->tree().Holes(1, geo.num_buckets());
  ASSERT_TRUE(holes.ok()) << holes.status().ToString();
  EXPECT_FALSE(holes->at(0)) << "the root holds data";
  EXPECT_TRUE(holes->at(geo.BucketOnPath(geo.first_leaf(), 2) - 1)) << "the leaf is a hole";
  // A path of holes only below the root, through another leaf: the same.
  got = Call(wire::RetrieveRequest{geo.first_leaf() + 1, select, {}}, 4);
  ASSERT_TRUE(std::holds_alternative<wire::RetrieveReply>(got)) << ErrorText(got);
  EXPECT_EQ(std::get<wire::RetrieveReply>(got).answer, want);
}

TEST_F(RequestHandlerTest, RetrieveWriteRootWritesFirstAndChecksBothPartsBeforeEither) {
  const wire::StoreShape shape{2, 2, 4};
  ASSERT_TRUE(std::holds_alternative<wire::InitReply>(Call(wire::InitRequest{0, shape, false})));
  ASSERT_TRUE(Acquire(2).granted);
  const TreeGeometry geo{shape.height, shape.bucket_size};
  auto unit_select = [&](std::size_t q) {
    std::vector<Elem> v(geo.path_slots(), 0);
    v[q] = 1;
    return v;
  };
  // Root slot 1 gets {5, 6, 7, 8}; the select picks exactly that slot (level 0).
  const std::vector<Elem> share{5, 6, 7, 8};
  wire::Body got =
      Call(wire::RetrieveWriteRootRequest{1, share, geo.first_leaf(), unit_select(1), {}, {}}, 3);
  ASSERT_TRUE(std::holds_alternative<wire::RetrieveReply>(got)) << ErrorText(got);
  EXPECT_EQ(std::get<wire::RetrieveReply>(got).answer, share);
  EXPECT_EQ(handler_->store()->meta().applied_seq, 3u);

  // A bad select (one entry short) with a root write to slot 0: refused, and
  // slot 0 still reads as never written.
  std::vector<Elem> short_select = unit_select(0);
  short_select.pop_back();
  got = Call(
      wire::RetrieveWriteRootRequest{0, {9, 9, 9, 9}, geo.first_leaf(), short_select, {}, {}}, 4);
  EXPECT_NE(ErrorText(got).find("select vector"), std::string::npos) << ErrorText(got);
  // A bad root write (slot out of range) with a good select: refused too.
  got = Call(
      wire::RetrieveWriteRootRequest{2, {9, 9, 9, 9}, geo.first_leaf(), unit_select(0), {}, {}}, 5);
  EXPECT_NE(ErrorText(got).find("slot out of range"), std::string::npos) << ErrorText(got);
  got = Call(wire::RetrieveRequest{geo.first_leaf(), unit_select(0), {}}, 6);
  ASSERT_TRUE(std::holds_alternative<wire::RetrieveReply>(got)) << ErrorText(got);
  EXPECT_EQ(std::get<wire::RetrieveReply>(got).answer, std::vector<Elem>(4, 0));
  EXPECT_EQ(handler_->store()->meta().applied_seq, 3u);

  // Only the holder of the lease may send it.
  epoch_ = 1;
  EXPECT_FALSE(
      ErrorText(
          Call(wire::RetrieveWriteRootRequest{0, share, geo.first_leaf(), unit_select(0), {}, {}},
               7))
          .empty());
  epoch_ = 2;
  got = Call(wire::StatsRequest{}, 8);
  ASSERT_TRUE(std::holds_alternative<wire::StatsReply>(got)) << ErrorText(got);
  EXPECT_EQ(std::get<wire::StatsReply>(got).root_writes, 1u);
  EXPECT_EQ(std::get<wire::StatsReply>(got).retrieves, 2u);
}

// Fail-stop storage at the handler: a slot changed on disk under a running
// server makes every retrieval that uses it fail with kDamaged naming the
// server, bucket and slot (the answer is checked against the stored digests by
// linearity); a retrieval whose select share for that slot is zero does not
// use it and is answered. A bucket that reads as a hole although its digests
// say it was written is damaged too.
TEST_F(RequestHandlerTest, DamagedSlotsFailRetrievalsThatUseThem) {
  const wire::StoreShape shape{2, 2, 1024};
  ASSERT_TRUE(std::holds_alternative<wire::InitReply>(Call(wire::InitRequest{0, shape, false})));
  ASSERT_TRUE(Acquire(2).granted);
  const TreeGeometry geo{shape.height, shape.bucket_size};
  std::vector<Elem> share(shape.elems_per_slot);
  for (std::size_t i = 0; i < share.size(); ++i) share[i] = static_cast<Elem>(11 + 31 * i);
  ASSERT_TRUE(
      std::holds_alternative<wire::WriteRootReply>(Call(wire::WriteRootRequest{1, share, {}}, 3)));
  std::vector<Elem> select(geo.path_slots());
  for (std::size_t i = 0; i < select.size(); ++i) select[i] = static_cast<Elem>(5 + i);
  wire::Body got = Call(wire::RetrieveRequest{geo.first_leaf(), select, {}}, 4);
  ASSERT_TRUE(std::holds_alternative<wire::RetrieveReply>(got)) << ErrorText(got);

  // Root slot 1 changes on disk (16 bytes inside it).
  const std::string path = config_.data_dir + "/shares.bin";
  const off_t slot1 = 4096 + 1 * 1024 * 4;
  {
    int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    std::vector<std::uint8_t> junk(16, 0x3c);
    ASSERT_EQ(::pwrite(fd, junk.data(), junk.size(), slot1 + 100), 16);
    ::close(fd);
  }
  got = Call(wire::RetrieveRequest{geo.first_leaf(), select, {}}, 5);
  const auto* err = std::get_if<wire::ErrorReply>(&got);
  ASSERT_NE(err, nullptr) << "a damaged slot was folded into an answer";
  EXPECT_EQ(err->code, static_cast<std::uint32_t>(Status::Code::kDamaged));
  EXPECT_NE(err->message.find("server 0"), std::string::npos) << err->message;
  EXPECT_NE(err->message.find("bucket 1 slot 1"), std::string::npos) << err->message;
  // The same path with a zero share for the damaged slot: the answer does not
  // use it.
  select[1] = 0;
  got = Call(wire::RetrieveRequest{geo.first_leaf(), select, {}}, 6);
  EXPECT_TRUE(std::holds_alternative<wire::RetrieveReply>(got)) << ErrorText(got);
  // A rewrite of the slot (the client's repair) makes it whole again.
  select[1] = 9;
  ASSERT_TRUE(
      std::holds_alternative<wire::WriteRootReply>(Call(wire::WriteRootRequest{1, share, {}}, 7)));
  got = Call(wire::RetrieveRequest{geo.first_leaf(), select, {}}, 8);
  EXPECT_TRUE(std::holds_alternative<wire::RetrieveReply>(got)) << ErrorText(got);

  // The leaf of the first path was never written (a hole); give it a digest,
  // as if the disk had lost the data written there.
  const std::uint64_t leaf_bucket = geo.BucketOnPath(geo.first_leaf(), 2);
  const std::uint64_t buckets = geo.num_buckets();
  const std::uint64_t data_end = 4096 + buckets * 2 * 1024 * 4;
  const std::uint64_t digest_at = (data_end + 4095) / 4096 * 4096 + (leaf_bucket - 1) * 2 * 8;
  {
    int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const std::uint32_t d[2] = {12345, 678};
    ASSERT_EQ(::pwrite(fd, d, sizeof d, static_cast<off_t>(digest_at)), 8);
    ::close(fd);
  }
  auto holes = handler_->store()->tree().Holes(leaf_bucket, 1);
  ASSERT_TRUE(holes.ok());
  if (!holes->at(0)) GTEST_SKIP() << "this filesystem does not report holes (SEEK_DATA)";
  got = Call(wire::RetrieveRequest{geo.first_leaf(), select, {}}, 9);
  err = std::get_if<wire::ErrorReply>(&got);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(err->code, static_cast<std::uint32_t>(Status::Code::kDamaged));
  EXPECT_NE(err->message.find("bucket " + std::to_string(leaf_bucket) + " slot 0"),
            std::string::npos)
      << err->message;
}

// The eviction's kernel pool runs eviction_nice below the threads that answer
// accesses (each of its threads lowers its own priority once at start).
TEST(RequestHandlerPriority, EvictionPoolThreadsRunAtTheLowerPriority) {
  TempDir dir;
  auto nice_counts = [] {
    std::map<int, int> counts;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      std::ifstream f(task.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      // Field 19 (nice) counted from after the ")" that ends the name.
      std::istringstream rest(stat.substr(stat.rfind(')') + 2));
      std::string field;
      for (int i = 3; i <= 19 && rest >> field; ++i) {
      }
      ++counts[std::stoi(field)];
    }
    return counts;
  };
  errno = 0;
  const int base = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  ASSERT_EQ(errno, 0);
  if (base > 19 - 7) GTEST_SKIP() << "this process already runs at nice " << base;
  const auto before = nice_counts();
  ServerConfig config;
  config.index = 0;
  config.listen = "tcp://127.0.0.1:1";
  config.peer_listen = "tcp://127.0.0.1:2";
  config.data_dir = dir.path() + "/data";
  config.threads = 3;
  config.eviction_nice = 7;
  config.sync = false;
  config.peers = {{1, "tcp://127.0.0.1:3", ""}, {2, "tcp://127.0.0.1:4", ""}};
  StubPeers peers;
  auto h = RequestHandler::Create(config, peers);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto after = nice_counts();
  const int lowered = after[base + 7] - (before.count(base + 7) ? before.at(base + 7) : 0);
  EXPECT_EQ(lowered, 3) << "threads at nice " << base + 7;
  // ...and the pool for accesses (3 threads) stays at the process's priority.
  EXPECT_GE(after[base], (before.count(base) ? before.at(base) : 0) + 3);
}

}  // namespace
}  // namespace s3oram::serverd

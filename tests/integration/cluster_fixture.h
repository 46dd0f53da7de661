// A temporary directory with three real s3oram-serverd processes on 127.0.0.1
// and a freshly initialised filesystem, for integration tests. Everything is
// removed (and every process it started is stopped) when the fixture ends.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cli/local_cluster.h"
#include "oramcore/base/private_file.h"
#include "oramcore/protocol/client.h"
#include "oramcore/state/state_file.h"
#include "tests/support/temp_dir.h"

namespace s3oram::testing {

inline std::unique_ptr<cluster::LocalCluster> StartCluster(const std::string& dir,
                                                           std::uint32_t peer_timeout_ms = 20000,
                                                           std::size_t servers = 3) {
  cluster::LocalClusterOptions o;
  o.dir = dir;
  o.servers = servers;
  const char* env = std::getenv("S3ORAM_SERVERD");
  o.serverd_path = env && *env ? env : S3ORAM_TEST_SERVERD;
  // S3ORAM_TEST_SERVER_LOG=debug shows every eviction's phases in server-<i>.log.
  const char* level = std::getenv("S3ORAM_TEST_SERVER_LOG");
  o.log_level = level && *level ? level : "warn";
  o.threads = 1;
  o.peer_timeout_ms = peer_timeout_ms;
  auto c = cluster::LocalCluster::Start(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

inline OramParams SmallParams(std::uint32_t block_bytes, std::uint32_t A, std::uint32_t H) {
  OramParams p;
  p.block_bytes = block_bytes;
  p.evict_rate = A;
  p.height = H;
  p.capacity_blocks = p.max_capacity_blocks();
  p.bucket_size = MinSafeBucketSize(A, H, p.lambda, p.capacity_blocks);
  return p;
}

// Block content derived from (id, tag), so a model keeps one tag per block.
inline std::vector<std::uint8_t> Content(std::size_t bytes, std::uint64_t id, std::uint64_t tag) {
  std::vector<std::uint8_t> out(bytes);
  std::mt19937_64 g(id * 0x9e3779b97f4a7c15ull + tag);
  for (auto& b : out) b = static_cast<std::uint8_t>(g());
  return out;
}

// What every block should hold; a block not in it reads as zeros.
using BlockModel = std::map<BlockId, std::vector<std::uint8_t>>;
// One access checked against the model: a write of fresh content (tag picks
// it), or a read that must return what the model holds.
inline ::testing::AssertionResult ModelAccess(OramClient& c, BlockModel& model, BlockId id,
                                              bool write, std::uint64_t tag) {
  if (write) {
    model[id] = Content(c.block_bytes(), id, tag);
    const Status st = c.Write(id, model[id]);
    if (!st.ok()) return ::testing::AssertionFailure() << "write " << id << ": " << st.ToString();
    return ::testing::AssertionSuccess();
  }
  auto r = c.Read(id);
  if (!r.ok()) return ::testing::AssertionFailure() << "read " << id << ": " << r.status().ToString();
  const auto it = model.find(id);
  if (*r != (it == model.end() ? std::vector<std::uint8_t>(c.block_bytes(), 0) : it->second)) {
    return ::testing::AssertionFailure() << "block " << id << " read other bytes than written";
  }
  return ::testing::AssertionSuccess();
}

// Points `config` at the cluster's servers, with their CURVE keys and the
// cluster's client key.
inline void UseCluster(FsConfig& config, const cluster::LocalCluster& c) {
  config.servers = c.endpoints();
  config.server_keys = c.server_public_keys();
  config.client_key_file = c.client_key_file();
}

// The passphrase of every test filesystem (tests also check that others fail).
inline constexpr const char* kTestPassphrase = "correct horse battery staple (test)";
inline Secret TestPassphrase() { return Secret::CopyOf(std::string_view(kTestPassphrase)); }
// Argon2id at its minimum cost: tests open filesystems hundreds of times.
inline KdfParams TestKdf() { return MinimalKdfParams(); }
inline Status TestInitialize(const std::string& state, const FsConfig& config,
                             bool overwrite_servers = false) {
  return OramClient::Initialize(state, config, TestPassphrase(), TestKdf(), overwrite_servers);
}
inline Result<std::unique_ptr<OramClient>> TestOpen(const std::string& state,
                                                    ClientOptions options = {}) {
  return OramClient::Open(state, TestPassphrase(), options);
}
// The state file unlocked with the test passphrase (what OramClient::Open
// does first), for tests that read or change the state below the client.
inline Result<std::shared_ptr<UnlockedState>> TestUnlock(const std::string& state) {
  S3ORAM_ASSIGN_OR_RETURN(auto unlocked, UnlockedState::Unlock(state, TestPassphrase()));
  return std::shared_ptr<UnlockedState>(std::move(unlocked));
}
inline Result<std::unique_ptr<ClientStateStore>> TestOpenStore(const std::string& state) {
  S3ORAM_ASSIGN_OR_RETURN(auto unlocked, TestUnlock(state));
  return ClientStateStore::Open(std::move(unlocked));
}
// A raw connection to the state's database, and the unlocked state whose VFS
// it goes through (keep both; close the connection first).
struct TestStateDb {
  std::shared_ptr<UnlockedState> state;
  sqlite3* db = nullptr;
  TestStateDb() = default;
  TestStateDb(const TestStateDb&) = delete;
  TestStateDb& operator=(const TestStateDb&) = delete;
  ~TestStateDb() {
    if (db != nullptr) sqlite3_close_v2(db);
  }
};
inline Status OpenTestStateDb(const std::string& state, TestStateDb& out) {
  S3ORAM_ASSIGN_OR_RETURN(out.state, TestUnlock(state));
  S3ORAM_ASSIGN_OR_RETURN(out.db, out.state->OpenDatabase());
  return Status::Ok();
}

// Points party `index` of the state at another endpoint and key (as if the
// operator had moved the server; a proxy in front of it, for tests), with
// SQL on the state file. The state must not be open elsewhere.
inline void RepointServer(const std::string& state, int index, const std::string& endpoint,
                          const std::string& key) {
  TestStateDb handle;
  ASSERT_TRUE(OpenTestStateDb(state, handle).ok());
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(handle.db,
                               "UPDATE servers SET endpoint = ?1, public_key = ?2 WHERE idx = ?3",
                               -1, &st, nullptr),
            SQLITE_OK);
  sqlite3_bind_text(st, 1, endpoint.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, key.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 3, index);
  EXPECT_EQ(sqlite3_step(st), SQLITE_DONE);
  sqlite3_finalize(st);
}

// params.parties servers (three unless the test asks for more) in a
// temporary directory with a freshly initialised filesystem
// whose client state is `state`; its passphrase is also in the private file
// `passfile` (for the CLI and the FUSE daemon). Use as
//   auto fs = MakeFs(params); ASSERT_TRUE(fs); auto& [dir, cluster, config, state] = *fs;
struct TestFs {
  TempDir dir;
  std::unique_ptr<cluster::LocalCluster> cluster;
  FsConfig config;
  std::string state;
  std::string passfile;
};

inline std::unique_ptr<TestFs> MakeFs(const OramParams& params,
                                     std::uint32_t peer_timeout_ms = 20000) {
  auto fs = std::make_unique<TestFs>();
  fs->cluster = StartCluster(fs->dir.Sub("cluster"), peer_timeout_ms, params.parties);
  if (!fs->cluster) return nullptr;
  fs->config.params = params;
  UseCluster(fs->config, *fs->cluster);
  fs->state = fs->dir.Sub("fs.s3oram");
  Status st = TestInitialize(fs->state, fs->config);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) return nullptr;
  fs->passfile = fs->dir.Sub("passphrase");
  const std::string_view pass(kTestPassphrase);
  st = WritePrivateFile(fs->passfile,
                        std::span(reinterpret_cast<const std::uint8_t*>(pass.data()), pass.size()));
  EXPECT_TRUE(st.ok()) << st.ToString();
  return st.ok() ? std::move(fs) : nullptr;
}

// Restarts every server of `fs` with the fault `spec` armed (e.g.
// "server.evict_prepare.mid_rounds~25" slows each eviction so accesses run
// beside it). Call from the test's main thread: a server forked from another
// thread is sent SIGKILL when that thread ends (PR_SET_PDEATHSIG).
inline Status RestartAllWithFault(TestFs& fs, const std::string& spec) {
  for (std::size_t i = 0; i < 3; ++i) {
    S3ORAM_RETURN_IF_ERROR(fs.cluster->Kill(i, SIGTERM));
    S3ORAM_RETURN_IF_ERROR(fs.cluster->Restart(i, {"S3ORAM_FAULT=" + spec}));
  }
  return Status::Ok();
}

// A request header as the filesystem's last client would have sent it next.
inline wire::Header HeaderFromState(const std::string& state) {
  wire::Header h;
  auto st = TestOpenStore(state);
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  if (!st.ok()) return h;
  h.fs_id = (*st)->config().fs_id;
  h.epoch = (*st)->counters().epoch;
  h.seq = (*st)->counters().seq + 1;
  return h;
}

inline ClientOptions FastRetryOptions() {
  ClientOptions o;
  o.requests.resend_after = std::chrono::milliseconds(500);
  o.requests.deadline = std::chrono::milliseconds(30000);
  o.evictions.resend_after = std::chrono::milliseconds(30000);
  o.evictions.deadline = std::chrono::milliseconds(120000);
  return o;
}

}  // namespace s3oram::testing

// s3oram rebuild with real servers: a server whose data directory is gone is
// recreated from the two others, byte for byte; what the client and the
// rebuilt server receive is masked; and the refusals (live target, target
// among the participants, requests to a server being rebuilt).
#include "oramcore/protocol/rebuild.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/math/shamir.h"
#include "oramcore/tree/geometry.h"
#include "oramcore/wire/transport.h"
#include "serverd/share_store.h"
#include "tests/integration/cluster_fixture.h"
#include "tests/integration/run_cli.h"
#include "tests/support/share_file.h"
#include "tests/support/test_scale.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using field::Elem;

using testing::CliRun;
using testing::RunCli;

std::string DataDir(const cluster::LocalCluster& c, std::size_t i) {
  return c.dir() + "/data-" + std::to_string(i);
}

std::uint64_t AllocatedBytes(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

// Writes `blocks` blocks of seeded random content; returns them by id.
std::map<BlockId, std::vector<std::uint8_t>> WriteBlocks(const std::string& state,
                                                         std::uint64_t blocks, std::uint64_t tag) {
  std::map<BlockId, std::vector<std::uint8_t>> model;
  auto c = testing::TestOpen(state, testing::FastRetryOptions());
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return model;
  for (BlockId id = 0; id < blocks; ++id) {
    model[id] = testing::Content((*c)->block_bytes(), id, tag);
    Status st = (*c)->Write(id, model[id]);
    EXPECT_TRUE(st.ok()) << "block " << id << ": " << st.ToString();
    if (!st.ok()) break;
  }
  return model;
}

void ExpectBlocks(const std::string& state,
                  const std::map<BlockId, std::vector<std::uint8_t>>& model) {
  auto c = testing::TestOpen(state, testing::FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const auto& [id, want] : model) {
    auto got = (*c)->Read(id);
    ASSERT_TRUE(got.ok()) << "block " << id << ": " << got.status().ToString();
    ASSERT_EQ(*got, want) << "block " << id;
  }
}

// Loses server k's disk: stop it, keep a copy of its share file at `copy`,
// remove its data directory entirely, start it again (empty).
void LoseServer(cluster::LocalCluster& c, std::size_t k, const std::string& copy) {
  ASSERT_TRUE(c.Kill(k, SIGTERM).ok());
  std::filesystem::copy_file(DataDir(c, k) + "/shares.bin", copy);
  std::filesystem::remove_all(DataDir(c, k));
  ASSERT_FALSE(std::filesystem::exists(DataDir(c, k)));
  Status st = c.Restart(k);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

// No server applied eviction `ne`, refused by one of them.
void ExpectNoServerCommitted(OramClient& c, std::uint64_t ne) {
  for (const auto& r : c.QueryServers(std::chrono::seconds(5))) {
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.reply.applied_evictions, ne) << r.endpoint << " committed a refused eviction";
  }
}

// The three servers' root.bin hold one consistent sharing: the secret from
// servers {0, 1} equals the one from {0, 2}, element by element.
void ExpectRootSnapshotsConsistent(cluster::LocalCluster& c, const OramParams& p) {
  const std::size_t n = std::size_t{p.bucket_size} * p.elems_per_slot();
  std::vector<std::vector<Elem>> shares(3, std::vector<Elem>(n));
  for (std::size_t k = 0; k < 3; ++k) {
    std::ifstream in(DataDir(c, k) + "/root.bin", std::ios::binary);
    ASSERT_TRUE(in) << "server " << k << " has no root.bin";
    in.seekg(4096);
    in.read(reinterpret_cast<char*>(shares[k].data()),
            static_cast<std::streamsize>(n * sizeof(Elem)));
    ASSERT_TRUE(in) << "server " << k << ": root.bin is short";
  }
  auto secret = [&](std::size_t a, std::size_t b) {
    const std::vector<Elem> xs{shamir::PartyX(a), shamir::PartyX(b)};
    auto w = shamir::LagrangeAtZero(xs);
    EXPECT_TRUE(w.ok());
    std::vector<Elem> out(n);
    for (std::size_t i = 0; i < n; ++i) {
      out[i] = field::Add(field::Mul((*w)[0], shares[a][i]), field::Mul((*w)[1], shares[b][i]));
    }
    return out;
  };
  EXPECT_TRUE(secret(0, 1) == secret(0, 2)) << "the root snapshots are not one sharing";
}

// `s3oram rebuild --server bad` (no --force: its scrub must find the
// damage), then every block of `model` reads back.
void RebuildAndExpectBlocks(const testing::TestFs& fs, std::size_t bad,
                            const std::map<BlockId, std::vector<std::uint8_t>>& model) {
  CliRun r = RunCli("rebuild -s " + fs.state + " --server " + std::to_string(bad) + " --passfile " +
                    fs.passfile + " --plain-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectBlocks(fs.state, model);
}

// Adds 1 to element 1 of slot `slot` of bucket `b` in server `k`'s share
// file, with the server stopped: still a field element, so only the slot's
// digest can tell.
void DamageElem(cluster::LocalCluster& c, std::size_t k, const OramParams& params, std::uint64_t b,
                std::uint64_t slot) {
  ASSERT_TRUE(c.Kill(k, SIGTERM).ok());
  {
    const std::string path = DataDir(c, k) + "/shares.bin";
    auto at = serverd::StoreInspection::InspectFile(path);
    ASSERT_TRUE(at.ok()) << at.status().ToString();
    const auto off =
        static_cast<std::streamoff>((*at)[b].data + slot * params.slot_bytes() + 8);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    Elem e = 0;
    f.seekg(off);
    f.read(reinterpret_cast<char*>(&e), 4);
    e = field::Add(e, 1);
    f.seekp(off);
    f.write(reinterpret_cast<const char*>(&e), 4);
    ASSERT_TRUE(f.good()) << path;
  }
  Status st = c.Restart(k);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

// A bucket on the next eviction's path changed on one server's disk: the
// eviction is refused by that server (its digests), the client names it and
// stops (a second access that needs the eviction fails at once, without
// another round of peer timeouts), no server commits anything, and after
// `rebuild` of the damaged server (no --force: the scrub finds the damage)
// a new client finishes the eviction and every block reads back.
TEST(RebuildTest, DamagedEvictionInputStopsEvictionsUntilTheServerIsRebuilt) {
  const std::uint64_t seed = testing::TestSeed();
  const OramParams params = testing::SmallParams(256, 4, 4);
  auto fs = testing::MakeFs(params, /*peer_timeout_ms=*/1500);
  ASSERT_TRUE(fs);
  const std::size_t bad = 1 + seed % 2;
  std::map<BlockId, std::vector<std::uint8_t>> model;
  bool met_by_eviction = false;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (BlockId id = 0; id < 2 * params.evict_rate; ++id) {
      model[id] = testing::Content((*c)->block_bytes(), id, seed);
      ASSERT_TRUE((*c)->Write(id, model[id]).ok());
    }
    // The leaf sibling the next eviction reads (its last round): a
    // retrieval crosses it only on a path to that leaf, so the eviction is
    // almost always what meets the damage first.
    const std::uint64_t ne = (*c)->counters().ne;
    const TreeGeometry geo = params.geometry();
    const std::uint64_t b =
        TreeGeometry::Sibling(geo.BucketOnPath(geo.EvictionLeaf(ne), geo.height));
    std::printf("damaging bucket %llu (the leaf sibling of eviction %llu) on server %zu\n",
                static_cast<unsigned long long>(b), static_cast<unsigned long long>(ne), bad);
    DamageElem(*fs->cluster, bad, params, b, 0);
    // Accesses go on until one meets the damage (the eviction, at the
    // latest A accesses on).
    Status st;
    for (std::uint32_t k = 0; k <= params.evict_rate && st.ok(); ++k) {
      st = (*c)->Write(k, model[k]);
    }
    ASSERT_EQ(st.code(), Status::Code::kDamaged) << st.ToString();
    EXPECT_NE(st.message().find("server " + std::to_string(bad) + " has damaged storage: bucket " +
                                std::to_string(b)),
              std::string::npos)
        << st.message();
    const bool by_eviction = st.message().find("eviction " + std::to_string(ne)) != std::string::npos;
    std::printf("the damage was met by %s\n", by_eviction ? "the eviction" : "a retrieval");
    if (by_eviction) {
      // Refused again at once: the same eviction is due.
      Status again = (*c)->Write(1, model[1]);
      EXPECT_EQ(again.code(), Status::Code::kDamaged) << again.ToString();
      EXPECT_NE(again.message().find("until the damaged server is repaired"), std::string::npos)
          << again.message();
    }
    ExpectNoServerCommitted(**c, ne);
    met_by_eviction = by_eviction;
  }
  if (!met_by_eviction) {
    RebuildAndExpectBlocks(*fs, bad, model);
    return;
  }
  // Every server copied the root aside when the refused eviction started; the
  // rebuilt server gets its share of that copy too, consistent with the
  // others', so the eviction prepared again reads the same root everywhere.
  CliRun r = RunCli("rebuild -s " + fs->state + " --server " + std::to_string(bad) +
                    " --passfile " + fs->passfile + " --plain-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rebuilt the root snapshot of eviction"), std::string::npos) << r.output;
  ExpectRootSnapshotsConsistent(*fs->cluster, params);
  ExpectBlocks(fs->state, model);
}

// An upper sibling of the next eviction's path (a bucket the eviction
// overwrites with a copy of its parent, without using what it held) changed
// on one server's disk just before that eviction runs: the server refuses
// the eviction (it checks the old sibling's digests before the copy), so the
// damage stays where scrub and the rebuild find it instead of vanishing under
// the copy; the client stops, no server commits, and after the rebuild every
// block reads back. Without the sibling check the eviction commits.
TEST(RebuildTest, DamagedUpperSiblingStopsTheEvictionThatWouldOverwriteIt) {
  const std::uint64_t seed = testing::TestSeed();
  const OramParams params = testing::SmallParams(256, 4, 4);
  auto fs = testing::MakeFs(params, /*peer_timeout_ms=*/1500);
  ASSERT_TRUE(fs);
  const std::size_t bad = seed % 3;
  std::map<BlockId, std::vector<std::uint8_t>> model;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    // Three evictions (so some upper siblings hold data, others are holes),
    // then writes until one root slot is left: the access that fills it runs
    // the next eviction when it is done. (The newest access's root write is
    // deferred to the next one and holds slot nr, so that access writes
    // slot nr + 1 = A - 1.) Three rounds, not one, so a dozen blocks lie on
    // random paths: with five, all of them crossed a level-1 sibling in one
    // run of thirty, and no read could avoid it.
    for (BlockId id = 0; id < params.capacity_blocks; ++id) {
      if (id > 3 * params.evict_rate && (*c)->counters().nr + 2 == params.evict_rate) break;
      model[id] = testing::Content((*c)->block_bytes(), id, seed);
      ASSERT_TRUE((*c)->Write(id, model[id]).ok());
    }
    ASSERT_EQ((*c)->counters().nr + 2, params.evict_rate);
    // Eviction ne (the committed count) is in flight since the end of the
    // last round; the one the next root fill starts is ne + 1.
    const std::uint64_t ne = (*c)->counters().ne + 1;
    const TreeGeometry geo = params.geometry();
    const std::uint64_t slot = (seed / 3) % params.bucket_size;
    // That access reads a block whose path avoids b, so the eviction, not
    // its retrieval, meets the damage (the newest block's position is still
    // in the client's deferred root write: not that one). The level is the
    // seed's, or the next one where some block avoids its sibling
    // (positions come from the CSPRNG, not the seed).
    std::uint32_t level = 0;
    std::uint64_t b = 0;
    std::optional<BlockId> reader;
    for (std::uint32_t k = 0; k + 1 < geo.height && !reader; ++k) {
      level = 1 + static_cast<std::uint32_t>((seed + k) % (geo.height - 1));
      b = TreeGeometry::Sibling(geo.BucketOnPath(geo.EvictionLeaf(ne), level));
      for (const auto& [id, bytes] : model) {
        const PositionEntry* e = (*c)->position_map().Find(id);
        if (id + 1 < model.size() && e && geo.BucketOnPath(e->pos.leaf, level) != b) {
          reader = id;
          break;
        }
      }
    }
    ASSERT_TRUE(reader.has_value()) << "no written block with a path that avoids an upper sibling";
    std::printf(
        "damaging bucket %llu slot %llu (the upper sibling at level %u of eviction %llu) "
        "on server %zu; block %llu is read\n",
        static_cast<unsigned long long>(b), static_cast<unsigned long long>(slot), level,
        static_cast<unsigned long long>(ne), bad, static_cast<unsigned long long>(*reader));
    DamageElem(*fs->cluster, bad, params, b, slot);
    // Accesses go on (their eviction starts in the background) until the
    // damage is met: by eviction ne when its result is collected, at the end
    // of the next round at the latest; by the eviction in flight if b was
    // among its inputs (eviction ne's upper siblings lie on the paths of
    // the evictions before it); or by a retrieval whose path crosses b (a
    // block read from the client's own root copy retrieves a random path).
    // Whichever it is, writes stop, the message names the slot, and no
    // server applies eviction ne, which would have overwritten it.
    for (std::uint32_t k = 0; k <= 2 * params.evict_rate && !(*c)->writes_stopped(); ++k) {
      std::optional<BlockId> next;
      for (const auto& [id, bytes] : model) {
        const PositionEntry* e = (*c)->position_map().Find(id);
        if (e && geo.BucketOnPath(e->pos.leaf, level) != b) {
          next = id;
          break;
        }
      }
      ASSERT_TRUE(next.has_value());
      Result<std::vector<std::uint8_t>> got = (*c)->Read(*next);
      if (!got.ok()) {
        ASSERT_EQ(got.status().code(), Status::Code::kDamaged) << got.status().ToString();
        break;
      }
      EXPECT_EQ(*got, model[*next]);
    }
    ASSERT_TRUE((*c)->writes_stopped().has_value())
        << "the eviction overwrote a damaged sibling without noticing";
    const std::string& why = (*c)->writes_stopped()->message();
    EXPECT_NE(why.find("server " + std::to_string(bad) + " has damaged storage: bucket " +
                       std::to_string(b) + " slot " + std::to_string(slot)),
              std::string::npos)
        << why;
    for (const auto& r : (*c)->QueryServers(std::chrono::seconds(5))) {
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      EXPECT_LE(r.reply.applied_evictions, ne) << r.endpoint << " applied eviction " << ne;
    }
  }
  RebuildAndExpectBlocks(*fs, bad, model);
}

// 1. The CLI rebuilds a server whose data directory was deleted: the share
// file's data region is identical to the lost one (degree-t interpolation
// reproduces it exactly), holes stay holes, and every block reads back.
TEST(RebuildTest, CliRebuildsLostServerByteForByte) {
  const std::uint64_t seed = testing::TestSeed();
  // 768 blocks of 4 KiB: 3 MiB of content, 48 evictions (a quarter of that
  // under the sanitizers, which still takes every path).
  const int blocks = testing::ScaledForBuild(768, 4, 192);
  auto fs = testing::MakeFs(testing::SmallParams(4096, 16, 7));
  ASSERT_TRUE(fs);
  const std::size_t k = seed % 3;
  std::printf("seed %llu, rebuilding server %zu\n", static_cast<unsigned long long>(seed), k);
  const auto model = WriteBlocks(fs->state, blocks, seed);
  ASSERT_EQ(model.size(), static_cast<std::size_t>(blocks));

  const std::string copy = fs->dir.Sub("original-shares.bin");
  LoseServer(*fs->cluster, k, copy);
  // A client cannot work with the server empty, and says what to do.
  auto refused = testing::TestOpen(fs->state, testing::FastRetryOptions());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("rebuild --server " + std::to_string(k)),
            std::string::npos)
      << refused.status().ToString();

  CliRun r = RunCli("rebuild -s " + fs->state + " --server " + std::to_string(k) +
                    " --passfile " + fs->passfile + " --no-verify --plain-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("server " + std::to_string(k) + " rebuilt from servers"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rebuild server " + std::to_string(k)), std::string::npos)
      << "no progress line: " << r.output;

  const std::string rebuilt_path = DataDir(*fs->cluster, k) + "/shares.bin";
  const auto original = testing::ShareFileElems(copy);
  const auto rebuilt = testing::ShareFileElems(rebuilt_path);
  ASSERT_EQ(rebuilt.size(), original.size());
  ASSERT_FALSE(original.empty());
  // The slot digests differ (each store draws its own digest key), and so
  // may the places the buckets lie in (the rebuilt store puts every bucket
  // in its own place); the shares must be the lost ones exactly.
  std::size_t differing = 0;
  for (std::size_t i = 0; i < original.size(); ++i) differing += rebuilt[i] != original[i];
  EXPECT_EQ(differing, 0u) << "elements of the rebuilt buckets that differ from the lost ones";
  // Sparse: never-written buckets were not written.
  EXPECT_LE(AllocatedBytes(rebuilt_path), AllocatedBytes(copy) + (1u << 20));
  EXPECT_LT(AllocatedBytes(rebuilt_path), std::filesystem::file_size(rebuilt_path));

  ExpectBlocks(fs->state, model);
}

Result<wire::Message> Ask(ServerSet& servers, std::size_t i, const wire::Header& h,
                          const wire::Body& body, wire::MessageType expected) {
  TransportOptions t{std::chrono::milliseconds(2000), std::chrono::milliseconds(20000)};
  auto r = servers.ExchangeWith({i}, {wire::Encode(h, body)}, h, expected, t);
  if (!r.ok()) return r.status();
  return std::move(r.value()[0]);
}

void ExpectRefused(const Result<wire::Message>& r, Status::Code code, const std::string& needle) {
  ASSERT_FALSE(r.ok()) << "expected a refusal mentioning '" << needle << "'";
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
}

// 3. Refusals: the CLI will not replace a live store without --force nor
// rebuild a server that does not exist; a survivor refuses a read whose
// participants include the target (or exclude itself) or whose range is out
// of bounds; a server being rebuilt refuses normal requests and reports it,
// and a later `s3oram rebuild` (verified) completes it.
TEST(RebuildTest, RefusalsAndRebuildingServerRefusesRequests) {
  const std::uint64_t seed = testing::TestSeed();
  auto fs = testing::MakeFs(testing::SmallParams(512, 8, 4));
  ASSERT_TRUE(fs);
  const auto model = WriteBlocks(fs->state, 40, seed);
  ASSERT_EQ(model.size(), 40u);
  const std::string base = "rebuild -s " + fs->state + " --passfile " + fs->passfile + " ";

  CliRun live = RunCli(base + "--server 1");
  EXPECT_NE(live.exit_code, 0) << live.output;
  EXPECT_NE(live.output.find("live store"), std::string::npos) << live.output;
  EXPECT_NE(live.output.find("--force"), std::string::npos) << live.output;
  CliRun range = RunCli(base + "--server 3");
  EXPECT_NE(range.exit_code, 0) << range.output;
  EXPECT_NE(range.output.find("does not exist"), std::string::npos) << range.output;
  ExpectBlocks(fs->state, model);  // nothing changed

  auto key = LoadCurveKeypair(fs->cluster->client_key_file());
  ASSERT_TRUE(key.ok());
  auto servers =
      NetworkServerSet::Connect(fs->cluster->endpoints(), fs->cluster->server_public_keys(), *key);
  ASSERT_TRUE(servers.ok());
  // This test plays a rebuild client: it holds server 0's lease in a newer
  // epoch, which it records in the state (as the rebuild would).
  wire::Header h = testing::HeaderFromState(fs->state);
  h.epoch += 1;
  {
    auto granted = Ask(**servers, 0, h, wire::LeaseAcquireRequest{}, wire::MessageType::kLeaseReply);
    ASSERT_TRUE(granted.ok()) << granted.status().ToString();
    ASSERT_TRUE(std::get<wire::LeaseReply>(granted->body).granted);
    auto st = testing::TestOpenStore(fs->state);
    ASSERT_TRUE(st.ok());
    Counters c = (*st)->counters();
    c.epoch = h.epoch;
    ClientStateStore::Batch b;
    b.SetCounters(c);
    ASSERT_TRUE((*st)->Commit(b, true).ok());
  }
  wire::RebuildReadRequest read;
  read.target = 1;
  read.participants = {0, 1};
  read.first_bucket = 1;
  read.count = 1;
  ExpectRefused(Ask(**servers, 0, h, read, wire::MessageType::kRebuildReadReply),
                Status::Code::kInvalidArgument, "among the participants");
  read.target = 0;
  read.participants = {1, 2};
  ExpectRefused(Ask(**servers, 0, h, read, wire::MessageType::kRebuildReadReply),
                Status::Code::kInvalidArgument, "not among the participants");
  read.target = 2;
  read.participants = {0, 1};
  read.first_bucket = 31;  // H = 4: buckets 1..31
  read.count = 2;
  ExpectRefused(Ask(**servers, 0, h, read, wire::MessageType::kRebuildReadReply),
                Status::Code::kInvalidArgument, "outside");
  read.participants = {0};
  ExpectRefused(Ask(**servers, 0, h, read, wire::MessageType::kRebuildReadReply),
                Status::Code::kInvalidArgument, "participants");
  ASSERT_TRUE(
      Ask(**servers, 0, h, wire::LeaseReleaseRequest{}, wire::MessageType::kLeaseReply).ok());

  // REBUILD_BEGIN on a live server needs force; with it, server 2 is rebuilding.
  const OramParams& p = fs->config.params;
  wire::RebuildBeginRequest begin{2, {p.height, p.bucket_size,
                                      static_cast<std::uint32_t>(p.elems_per_slot())},
                                  0, 0, false};
  ExpectRefused(Ask(**servers, 2, h, begin, wire::MessageType::kRebuildBeginReply),
                Status::Code::kAlreadyExists, "live store");
  // A catch-up (what an excluded server gets) takes the live store as it
  // is: begun, and begun again (a resend after a lost reply) with the same
  // answer.
  wire::RebuildBeginRequest catch_up = begin;
  catch_up.catch_up = true;
  {
    // To the count it has: a catch-up never goes below a server's own.
    auto status = Ask(**servers, 2, h, wire::StatusRequest{}, wire::MessageType::kStatusReply);
    ASSERT_TRUE(status.ok());
    catch_up.applied_evictions = std::get<wire::StatusReply>(status->body).applied_evictions;
    catch_up.applied_seq = std::get<wire::StatusReply>(status->body).applied_seq;
    wire::RebuildBeginRequest below = catch_up;
    if (below.applied_evictions > 0) {
      below.applied_evictions -= 1;
      ExpectRefused(Ask(**servers, 2, h, below, wire::MessageType::kRebuildBeginReply),
                    Status::Code::kInvalidArgument, "more than the");
    }
  }
  auto caught = Ask(**servers, 2, h, catch_up, wire::MessageType::kRebuildBeginReply);
  ASSERT_TRUE(caught.ok()) << caught.status().ToString();
  caught = Ask(**servers, 2, h, catch_up, wire::MessageType::kRebuildBeginReply);
  ASSERT_TRUE(caught.ok()) << "a catch-up BEGIN sent again: " << caught.status().ToString();
  // Sent again by the same client (its epoch) at newer counters, it moves
  // the catch-up's goal (a mount's last pass); older ones are refused, and
  // another client's (a newer epoch: the first one's mount crashed) begins
  // the catch-up again, fencing off the first.
  catch_up.applied_seq += 5;
  caught = Ask(**servers, 2, h, catch_up, wire::MessageType::kRebuildBeginReply);
  ASSERT_TRUE(caught.ok()) << "a catch-up BEGIN at newer counters: " << caught.status().ToString();
  wire::RebuildBeginRequest older = catch_up;
  older.applied_seq -= 1;
  ExpectRefused(Ask(**servers, 2, h, older, wire::MessageType::kRebuildBeginReply),
                Status::Code::kInvalidArgument, "behind the");
  wire::Header other_client = h;
  other_client.epoch += 1;
  caught = Ask(**servers, 2, other_client, catch_up, wire::MessageType::kRebuildBeginReply);
  ASSERT_TRUE(caught.ok()) << "a newer client's catch-up BEGIN: " << caught.status().ToString();
  ExpectRefused(Ask(**servers, 2, h, catch_up, wire::MessageType::kRebuildBeginReply),
                Status::Code::kFailedPrecondition, "fenced");
  ExpectRefused(Ask(**servers, 2, h,
                    wire::RebuildFinishRequest{catch_up.applied_seq, catch_up.applied_evictions},
                    wire::MessageType::kRebuildFinishReply),
                Status::Code::kFailedPrecondition, "fenced");
  {
    auto status = Ask(**servers, 2, h, wire::StatusRequest{}, wire::MessageType::kStatusReply);
    ASSERT_TRUE(status.ok());
    EXPECT_TRUE(std::get<wire::StatusReply>(status->body).rebuilding);
  }
  begin.force = true;
  auto begun = Ask(**servers, 2, h, begin, wire::MessageType::kRebuildBeginReply);
  ASSERT_TRUE(begun.ok()) << begun.status().ToString();
  auto st = Ask(**servers, 2, h, wire::StatusRequest{}, wire::MessageType::kStatusReply);
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(std::get<wire::StatusReply>(st->body).rebuilding);
  EXPECT_FALSE(std::get<wire::StatusReply>(st->body).initialized);
  const std::vector<Elem> share(p.elems_per_slot(), 0);
  ExpectRefused(Ask(**servers, 2, h, wire::WriteRootRequest{0, share, {}},
                    wire::MessageType::kWriteRootReply),
                Status::Code::kFailedPrecondition, "being rebuilt");
  const std::vector<Elem> select(std::size_t{p.bucket_size} * (p.height + 1), 0);
  ExpectRefused(Ask(**servers, 2, h, wire::RetrieveRequest{(1u << p.height), select, {}},
                    wire::MessageType::kRetrieveReply),
                Status::Code::kFailedPrecondition, "being rebuilt");
  ExpectRefused(Ask(**servers, 2, h, wire::EvictCommitRequest{0},
                    wire::MessageType::kEvictCommitReply),
                Status::Code::kFailedPrecondition, "being rebuilt");
  // Nor can the rebuild be finished before every bucket was written.
  ExpectRefused(Ask(**servers, 2, h, wire::RebuildFinishRequest{0, 0},
                    wire::MessageType::kRebuildFinishReply),
                Status::Code::kFailedPrecondition, "were written");
  CliRun status = RunCli("status -s " + fs->state + " --passfile " + fs->passfile);
  EXPECT_NE(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("server 2"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("is being rebuilt; finish it with s3oram rebuild --server 2"),
            std::string::npos)
      << status.output;
  EXPECT_FALSE(testing::TestOpen(fs->state, testing::FastRetryOptions()).ok());
  servers->reset();

  // The interrupted rebuild is simply run again (no --force: the store is not
  // live), this time with verification.
  CliRun done = RunCli(base + "--server 2 --plain-progress");
  ASSERT_EQ(done.exit_code, 0) << done.output;
  EXPECT_NE(done.output.find("verified: 40 live blocks"), std::string::npos) << done.output;
  ExpectBlocks(fs->state, model);
}

}  // namespace
}  // namespace s3oram

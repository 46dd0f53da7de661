// A server that lies on purpose (the s3oram-serverd-liar test build,
// serverd/lie.h), and one whose stored shares are wrong although their
// digests verify, against real servers. Each case states what the system
// promises (docs/SECURITY.md, "A server that lies"): no wrong data is ever
// returned, and what is detected before it can destroy data, or only when
// the data are read.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "oramcore/crypto/key_wrap.h"
#include "oramcore/math/field.h"
#include "oramcore/state/master_key_switch.h"
#include "oramcore/state/state_file.h"
#include "oramcore/tree/geometry.h"
#include "serverd/share_store.h"
#include "tests/integration/cluster_fixture.h"
#include "tests/integration/run_cli.h"
#include "tests/integration/share_damage.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using field::Elem;
using Model = std::map<BlockId, std::vector<std::uint8_t>>;

std::string Liar() {
  const char* env = std::getenv("S3ORAM_SERVERD_LIAR");
  return env && *env ? env : S3ORAM_TEST_SERVERD_LIAR;
}

std::string DataDir(const cluster::LocalCluster& c, std::size_t i) {
  return c.dir() + "/data-" + std::to_string(i);
}

using testing::CliRun;
using testing::RunCli;

// Server i runs the liar build practising `kinds` (or, empty, the honest
// server again), with the same data.
void Become(cluster::LocalCluster& c, std::size_t i, const std::string& kinds) {
  ASSERT_TRUE(c.Kill(i, SIGTERM).ok());
  const Status st = kinds.empty() ? c.Restart(i) : c.Restart(i, {"S3ORAM_LIE=" + kinds}, Liar());
  ASSERT_TRUE(st.ok()) << st.ToString();
}

Model WriteBlocks(OramClient& c, std::uint64_t blocks, std::uint64_t tag) {
  Model model;
  for (BlockId id = 0; id < blocks; ++id) {
    model[id] = testing::Content(c.block_bytes(), id, tag);
    const Status st = c.Write(id, model[id]);
    EXPECT_TRUE(st.ok()) << "block " << id << ": " << st.ToString();
  }
  return model;
}

// Every block reads back exactly (a new client: no memo of earlier refusals).
void ExpectBlocks(const std::string& state, const Model& model) {
  auto c = testing::TestOpen(state, testing::FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const auto& [id, want] : model) {
    auto got = (*c)->Read(id);
    ASSERT_TRUE(got.ok()) << "block " << id << ": " << got.status().ToString();
    ASSERT_EQ(*got, want) << "block " << id;
  }
}

std::vector<std::uint64_t> AppliedEvictions(OramClient& c) {
  std::vector<std::uint64_t> out;
  for (const auto& r : c.QueryServers(std::chrono::seconds(10))) {
    EXPECT_TRUE(r.status.ok()) << r.status.ToString();
    out.push_back(r.reply.applied_evictions);
  }
  return out;
}

// (a) Wrong retrieval answers: every read through the liar fails
// authentication, none returns other bytes than were written; with the
// server honest again every block is there.
TEST(LyingServerTest, WrongRetrievalAnswersFailReadsAndLoseNothing) {
  const std::uint64_t seed = testing::TestSeed();
  const OramParams params = testing::SmallParams(256, 4, 4);
  auto fs = testing::MakeFs(params, /*peer_timeout_ms=*/3000);
  ASSERT_TRUE(fs);
  const std::size_t liar = seed % 3;
  std::printf("[ seed     ] %llu: server %zu lies about retrievals\n",
              static_cast<unsigned long long>(seed), liar);
  Model model;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    model = WriteBlocks(**c, 6, seed);
  }
  Become(*fs->cluster, liar, "retrieve");
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (const auto& [id, want] : model) {
      auto got = (*c)->Read(id);
      ASSERT_FALSE(got.ok()) << "block " << id << " was read through a lying server";
      EXPECT_EQ(got.status().code(), Status::Code::kIntegrity) << got.status().ToString();
    }
  }
  Become(*fs->cluster, liar, "");
  ExpectBlocks(fs->state, model);
}

// (a') The same liar among four servers (t = 1: any three answers give the
// degree-2 answer): it is outvoted. Every read returns the bytes written,
// through evictions; the wrong answers are counted against the liar alone,
// and the state's problem note names it by endpoint; writes go on.
TEST(LyingServerTest, WithFourServersWrongRetrievalAnswersAreOutvotedAndTheLiarNamed) {
  const std::uint64_t seed = testing::TestSeed();
  OramParams params = testing::SmallParams(256, 4, 4);
  params.parties = 4;
  auto fs = testing::MakeFs(params, /*peer_timeout_ms=*/3000);
  ASSERT_TRUE(fs);
  const std::size_t liar = seed % 4;
  std::printf("[ seed     ] %llu: server %zu of four lies about retrievals\n",
              static_cast<unsigned long long>(seed), liar);
  Model model;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    model = WriteBlocks(**c, 6, seed);
  }
  Become(*fs->cluster, liar, "retrieve");
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const std::uint64_t evictions = (*c)->counters().ne;
    for (const auto& [id, want] : model) {
      auto got = (*c)->Read(id);
      ASSERT_TRUE(got.ok()) << "block " << id << ": " << got.status().ToString();
      ASSERT_EQ(*got, want) << "block " << id;
    }
    for (auto& [id, bytes] : WriteBlocks(**c, 10, seed + 1)) model[id] = bytes;
    EXPECT_GE((*c)->counters().ne, evictions + 2) << "the evictions did not go on";
    for (const auto& [id, want] : model) {
      auto got = (*c)->Read(id);
      ASSERT_TRUE(got.ok()) << "block " << id << ": " << got.status().ToString();
      ASSERT_EQ(*got, want) << "block " << id;
    }
    const std::vector<std::uint64_t>& wrong = (*c)->stats().wrong_answers;
    ASSERT_EQ(wrong.size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) {
      if (i == liar) {
        EXPECT_GT(wrong[i], 0u) << "the liar's answers were never found wrong";
      } else {
        EXPECT_EQ(wrong[i], 0u) << "honest server " << i << " counted as wrong";
      }
    }
    const auto& note = (*c)->problem_note();
    ASSERT_TRUE(note.has_value());
    EXPECT_FALSE(note->damaged);
    const std::string named = "server " + std::to_string(liar) + " (" +
                              fs->cluster->endpoints()[liar] + ") answered wrongly";
    EXPECT_NE(note->text.find(named), std::string::npos) << note->text;
    EXPECT_FALSE((*c)->writes_stopped().has_value());
  }
  Become(*fs->cluster, liar, "");
  ExpectBlocks(fs->state, model);
}

// The eviction of a client driven until it is due; returns the status of
// the access that met its refusal (an eviction starts after access r * A
// and is collected after access (r + 1) * A, in the background between).
Status DriveEviction(OramClient& c, const Model& model) {
  Status st;
  for (std::uint32_t k = 0; k <= 2 * c.params().evict_rate && st.ok(); ++k) {
    const BlockId id = k % model.size();
    st = c.Write(id, model.at(id));
  }
  return st;
}

// Starts a master-key rotation in the state at `state` (what the first step
// of `s3oram rekey` does, same passphrase) and re-seals nothing: every block
// written before stays sealed and tagged under the previous keys.
void StartRekey(const std::string& state) {
  auto u = UnlockedState::Unlock(state, testing::TestPassphrase());
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  const Secret master = NewMasterKey();
  auto wrap =
      WrapMasterKey(master, testing::TestPassphrase(), (*u)->header().fs_id, testing::TestKdf());
  ASSERT_TRUE(wrap.ok()) << wrap.status().ToString();
  auto header = SwitchMasterKey(**u, *wrap, master, nullptr);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
}

// (b), (c) and a memory fault: prepared buckets that are not one sharing,
// or one sharing of values that do not carry the client's share MAC, are
// refused before COMMIT on every attempt; no server commits; with the server
// honest again the eviction commits and every block reads back. With
// `during_rekey` the buckets mix slots tagged under the share MAC keys
// before and after a rotation, and the check verifies the half they share.
void ExpectEvictionRefused(const std::string& kind, const std::string& why,
                           bool during_rekey = false) {
  const std::uint64_t seed = testing::TestSeed();
  const OramParams params = testing::SmallParams(256, 4, 4);
  auto fs = testing::MakeFs(params, /*peer_timeout_ms=*/3000);
  ASSERT_TRUE(fs);
  const std::size_t liar = seed % 3;
  std::printf("[ seed     ] %llu: server %zu lies (%s)\n", static_cast<unsigned long long>(seed),
              liar, kind.c_str());
  Model model;
  std::vector<std::uint64_t> before;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    model = WriteBlocks(**c, 3, seed);
    before = AppliedEvictions(**c);
  }
  if (during_rekey) {
    StartRekey(fs->state);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
  }
  Become(*fs->cluster, liar, kind);
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    if (during_rekey) {
      ASSERT_TRUE((*c)->rekey());
      EXPECT_EQ((*c)->eviction_mac_check(), OramClient::EvictionMacCheck::kOneHalf);
    }
    const Status st = DriveEviction(**c, model);
    ASSERT_EQ(st.code(), Status::Code::kIntegrity) << st.ToString();
    EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("nothing was committed"), std::string::npos) << st.message();
    EXPECT_EQ(AppliedEvictions(**c), before) << "a server committed a refused eviction";
    // Refused again at once: the memo keeps the peers' time.
    const Status again = (*c)->Write(0, model.at(0));
    EXPECT_EQ(again.code(), Status::Code::kIntegrity) << again.ToString();
    ASSERT_TRUE((*c)->problem_note()) << "the refusal was not recorded";
  }
  // The liar's storage is clean, so scrub finds nothing, but the refused
  // eviction is still pending: the recorded problem stays until it commits.
  const std::string auth = " -s " + fs->state + " --passfile " + fs->passfile;
  const CliRun early = RunCli("scrub" + auth + " --plain-progress");
  EXPECT_EQ(early.exit_code, 0) << early.output;
  EXPECT_NE(early.output.find("stays until eviction"), std::string::npos) << early.output;
  EXPECT_NE(RunCli("status" + auth).output.find("problem "), std::string::npos);
  Become(*fs->cluster, liar, "");
  ExpectBlocks(fs->state, model);
  auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_GT(AppliedEvictions(**c)[0], before[0]) << "the eviction never committed";
  EXPECT_FALSE((*c)->problem_note())
      << "the commit left the note of its refusal: " << (*c)->problem_note()->text;
  c->reset();
  const CliRun scrub = RunCli("scrub -s " + fs->state + " --passfile " + fs->passfile +
                              " --plain-progress");
  EXPECT_EQ(scrub.exit_code, 0) << scrub.output;
}

TEST(LyingServerTest, InconsistentSmpSharesAreRefusedBeforeCommit) {
  ExpectEvictionRefused("smp-inconsistent", "inconsistent across the servers");
}

TEST(LyingServerTest, AWrongOutputWithAMatchingDigestIsRefusedBeforeCommit) {
  ExpectEvictionRefused("shadow", "inconsistent across the servers");
}

// (b) A server that re-shares a wrong value deals every server a consistent
// sharing of it, which no parity check can see; the share MAC does.
TEST(LyingServerTest, ConsistentWrongSharesAreRefusedBeforeCommit) {
  ExpectEvictionRefused("smp-consistent", "do not authenticate (share MAC)");
}

// Issue 42: the same while a master-key rotation is under way (it used to
// leave the share MAC out of the check for the whole rotation).
TEST(LyingServerTest, ConsistentWrongSharesDuringARekeyAreRefusedBeforeCommit) {
  ExpectEvictionRefused("smp-consistent", "do not authenticate (share MAC)",
                        /*during_rekey=*/true);
}

// (b) on a filesystem made before share MACs (mac_elems = 0): the limit of
// the consistency check. The eviction commits; what it moved is destroyed.
// The promise that holds is the weaker one: no read returns wrong data (each
// fails authentication). docs/SECURITY.md states this.
TEST(LyingServerTest, ConsistentWrongSharesWithoutShareMacsAreCaughtOnlyWhenRead) {
  const std::uint64_t seed = testing::TestSeed();
  OramParams params = testing::SmallParams(256, 4, 4);
  params.mac_elems = 0;
  auto fs = testing::MakeFs(params, /*peer_timeout_ms=*/3000);
  ASSERT_TRUE(fs);
  const std::size_t liar = seed % 3;
  std::printf("[ seed     ] %llu: server %zu deals consistent wrong shares\n",
              static_cast<unsigned long long>(seed), liar);
  Model model;
  std::vector<std::uint64_t> before;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    model = WriteBlocks(**c, 3, seed);
    before = AppliedEvictions(**c);
  }
  Become(*fs->cluster, liar, "smp-consistent");
  auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // The accesses after the eviction may already meet what it destroyed (a
  // whole-block write reads the old version first).
  const Status st = DriveEviction(**c, model);
  EXPECT_TRUE(st.ok() || st.code() == Status::Code::kIntegrity) << st.ToString();
  EXPECT_GT(AppliedEvictions(**c)[0], before[0]) << "the eviction was refused after all";
  std::size_t failed = 0;
  for (const auto& [id, want] : model) {
    auto got = (*c)->Read(id);
    if (got.ok()) {
      ASSERT_EQ(*got, want) << "block " << id << ": wrong data returned";
    } else {
      EXPECT_EQ(got.status().code(), Status::Code::kIntegrity) << got.status().ToString();
      ++failed;
    }
  }
  std::printf("%zu of %zu blocks unreadable after the wrong eviction\n", failed, model.size());
}

// (d) Forged counters: one server reporting 2^64-1 as its epoch, eviction
// count and newest backup generation is named and refused, never obeyed
// (no epoch wraps, no state is judged stale by it alone); honest again,
// everything opens and reads.
TEST(LyingServerTest, ForgedCountersAreNamedAndRefused) {
  const std::uint64_t seed = testing::TestSeed();
  const OramParams params = testing::SmallParams(256, 4, 4);
  auto fs = testing::MakeFs(params, /*peer_timeout_ms=*/3000);
  ASSERT_TRUE(fs);
  const std::size_t liar = seed % 3;
  std::printf("[ seed     ] %llu: server %zu forges counters\n",
              static_cast<unsigned long long>(seed), liar);
  Model model;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    model = WriteBlocks(**c, 3, seed);
  }
  Become(*fs->cluster, liar, "counters");
  const std::string who = "server " + std::to_string(liar) + " (";
  auto refused = testing::TestOpen(fs->state, testing::FastRetryOptions());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kFailedPrecondition)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find(who), std::string::npos) << refused.status().ToString();
  const CliRun status = RunCli("status -s " + fs->state + " --passfile " + fs->passfile);
  std::printf("%s\n", status.output.c_str());
  EXPECT_NE(status.output.find("SERVER INCONSISTENT: " + who), std::string::npos) << status.output;
  EXPECT_EQ(status.output.find("STALE"), std::string::npos) << status.output;
  Become(*fs->cluster, liar, "");
  ExpectBlocks(fs->state, model);
}

// Server `server`, stopped meanwhile, rewrites its share of (bucket, slot)
// with the digest recomputed (share_damage.h).
void RewriteSlotWithItsDigest(testing::TestFs& fs, const OramParams& params, std::size_t server,
                              std::uint64_t bucket, std::uint32_t slot, std::uint64_t seed) {
  ASSERT_TRUE(fs.cluster->Kill(server, SIGTERM).ok());
  testing::RewriteSlotWithItsDigest(DataDir(*fs.cluster, server) + "/shares.bin", params, bucket,
                                    slot, seed);
  ASSERT_TRUE(fs.cluster->Restart(server).ok());
}

// Writes blocks 0..A+1, past one eviction, so that the last one (A + 1)
// sits in the root, which the next eviction reads (and copies to its
// snapshot), with its deferred root write landed; *slot is its root slot.
void WriteLastBlockIntoRoot(OramClient& c, std::uint64_t seed, Model* model, std::uint32_t* slot) {
  *model = WriteBlocks(c, c.params().evict_rate + 2, seed);
  ASSERT_TRUE(c.Read(0).ok());  // lands the deferred root write
  const PositionEntry* e = c.position_map().Find(c.params().evict_rate + 1);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->pos.level, 0u) << "the last block written is not in the root";
  *slot = e->pos.slot;
}

// Shares changed on one server's disk together with their digests (what a
// memory fault before the digest, or a server rewriting its file, leaves):
// no digest check can see it; the scrub's cross-server check does, names the
// slot and says it holds a live block; other slots stay clean.
TEST(ConsistencyTest, ScrubFindsSharesThatVerifyButDisagree) {
  const std::uint64_t seed = testing::TestSeed();
  const OramParams params = testing::SmallParams(256, 4, 4);
  auto fs = testing::MakeFs(params, /*peer_timeout_ms=*/3000);
  ASSERT_TRUE(fs);
  const std::size_t bad = seed % 3;
  std::uint64_t bucket = 0;
  std::uint32_t slot = 0;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    // Past one eviction, so blocks live below the root too.
    (void)WriteBlocks(**c, params.evict_rate + 2, seed);
    const PositionMap& pm = (*c)->position_map();
    for (BlockId id = 0; id < pm.capacity() && bucket == 0; ++id) {
      if (const PositionEntry* e = pm.Find(id)) {
        const TreeGeometry geo = params.geometry();
        bucket = geo.BucketOnPath(e->pos.leaf, e->pos.level);
        slot = e->pos.slot;
      }
    }
  }
  ASSERT_NE(bucket, 0u);
  const CliRun clean = RunCli("scrub -s " + fs->state + " --passfile " + fs->passfile +
                              " --plain-progress");
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_NE(clean.output.find("one consistent sharing"), std::string::npos) << clean.output;

  std::printf("[ seed     ] %llu: bucket %llu slot %u rewritten on server %zu with its digest\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(bucket), slot,
              bad);
  RewriteSlotWithItsDigest(*fs, params, bad, bucket, slot, seed);
  const CliRun found = RunCli("scrub -s " + fs->state + " --passfile " + fs->passfile +
                              " --plain-progress");
  std::printf("%s\n", found.output.c_str());
  EXPECT_EQ(found.exit_code, 4) << found.output;
  EXPECT_NE(found.output.find("INCONSISTENT: 1 slots"), std::string::npos) << found.output;
  EXPECT_NE(found.output.find("bucket " + std::to_string(bucket) + " slot " + std::to_string(slot)),
            std::string::npos)
      << found.output;
  EXPECT_NE(found.output.find("1 of the first 1 hold a live block"), std::string::npos)
      << found.output;
  EXPECT_EQ(found.output.find("DAMAGED"), std::string::npos) << "the digests verify: " << found.output;
  // The share MAC names the server: the other two open to an authentic value.
  EXPECT_NE(found.output.find("server " + std::to_string(bad) + " holds the odd share of all 1 "
                              "slots checked"),
            std::string::npos)
      << found.output;
  EXPECT_NE(found.output.find("--server " + std::to_string(bad) + " --force"), std::string::npos)
      << found.output;
}

// Issue 42: a live root slot one server rewrote with its digest (stopped,
// then started again) is copied into that server's root snapshot (root.bin)
// by the next eviction's PREPARE, and the next round's honest root writes
// then replace it in the tree on every server: it lives on only in root.bin,
// which the eviction reads and refuses. Scrub must look there too: it finds
// the slot, names the server (share MAC), keeps the recorded problem; a
// forced rebuild of an honest server is refused naming the liar; the
// rebuild of the liar lets the eviction commit with the block intact.
TEST(ConsistencyTest, AChangedRootSlotInTheEvictionsSnapshotIsFoundNamedAndRepaired) {
  const std::uint64_t seed = testing::TestSeed();
  const OramParams params = testing::SmallParams(256, 4, 4);
  auto fs = testing::MakeFs(params, /*peer_timeout_ms=*/3000);
  ASSERT_TRUE(fs);
  const std::size_t bad = seed % 3;
  Model model;
  std::uint32_t slot = 0;
  std::vector<std::uint64_t> refused_at;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    WriteLastBlockIntoRoot(**c, seed, &model, &slot);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
  }
  std::printf("[ seed     ] %llu: live root slot %u rewritten on server %zu with its digest\n",
              static_cast<unsigned long long>(seed), slot, bad);
  RewriteSlotWithItsDigest(*fs, params, bad, 1, slot, seed);
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    // Writes to other blocks: the next eviction snapshots the root, the
    // round after it rewrites the root's slots, then the eviction is refused.
    Status st;
    for (std::uint32_t k = 0; k < 3 * params.evict_rate && st.ok(); ++k) {
      const BlockId id = k % 3;
      st = (*c)->Write(id, model.at(id));
    }
    ASSERT_EQ(st.code(), Status::Code::kIntegrity) << st.ToString();
    refused_at = AppliedEvictions(**c);
    EXPECT_EQ(refused_at[0], refused_at[1]) << "a server committed a refused eviction";
    EXPECT_EQ(refused_at[0], refused_at[2]) << "a server committed a refused eviction";
  }
  const std::string auth = " -s " + fs->state + " --passfile " + fs->passfile;
  const CliRun scrub = RunCli("scrub" + auth + " --plain-progress");
  std::printf("%s\n", scrub.output.c_str());
  EXPECT_EQ(scrub.exit_code, 4) << scrub.output;
  EXPECT_NE(scrub.output.find("root snapshot (root.bin) slot " + std::to_string(slot)),
            std::string::npos)
      << scrub.output;
  EXPECT_NE(scrub.output.find("server " + std::to_string(bad) + " holds the odd share"),
            std::string::npos)
      << scrub.output;
  EXPECT_EQ(scrub.output.find("repaired"), std::string::npos) << scrub.output;
  const CliRun status = RunCli("status" + auth);
  EXPECT_NE(status.output.find("problem "), std::string::npos) << status.output;

  const std::size_t honest = (bad + 1) % 3;
  const CliRun refused =
      RunCli("rebuild" + auth + " --server " + std::to_string(honest) + " --force --no-verify");
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("--server " + std::to_string(bad) + " --force"), std::string::npos)
      << refused.output;
  const CliRun rebuilt =
      RunCli("rebuild" + auth + " --server " + std::to_string(bad) + " --force --no-verify");
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;
  ExpectBlocks(fs->state, model);
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_GT(AppliedEvictions(**c)[0], refused_at[0]) << "the eviction never committed";
  }
  const CliRun clean = RunCli("scrub" + auth + " --plain-progress");
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
}

// A value that is wrong at rest on every server (two servers' shares
// rewritten, then the third rebuilt from them: the servers agree again, on a
// wrong value) is lost, but it must not stop evictions: the share-MAC check of an
// eviction that moves it finds the committed inputs unauthentic too, so the
// eviction commits (checked for consistency) and the loss is noted for
// `s3oram status`. Every other block reads back.
TEST(ConsistencyTest, AValueWrongAtRestIsLostButEvictionsGoOn) {
  const std::uint64_t seed = testing::TestSeed();
  const OramParams params = testing::SmallParams(256, 4, 4);
  auto fs = testing::MakeFs(params, /*peer_timeout_ms=*/3000);
  ASSERT_TRUE(fs);
  const std::size_t bad = seed % 3;
  Model model;
  BlockId lost = 0;
  std::uint64_t bucket = 0;
  std::uint32_t slot = 0;
  std::vector<std::uint64_t> before;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    // Past one eviction, and the last block written sits in the root, which
    // the next eviction reads (and copies to the root's sibling child).
    WriteLastBlockIntoRoot(**c, seed, &model, &slot);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    lost = params.evict_rate + 1;
    bucket = 1;
    before = AppliedEvictions(**c);
  }
  std::printf("[ seed     ] %llu: root slot %u rewritten on servers %zu and %zu, then server %zu "
              "rebuilt\n",
              static_cast<unsigned long long>(seed), slot, bad, (bad + 2) % 3, (bad + 1) % 3);
  RewriteSlotWithItsDigest(*fs, params, bad, bucket, slot, seed);
  // With one server's share changed the share MAC names it, and rebuilding
  // another one is refused; two changed shares cannot be attributed.
  const CliRun refused = RunCli("rebuild -s " + fs->state + " --passfile " + fs->passfile +
                                " --server " + std::to_string((bad + 1) % 3) +
                                " --force --no-verify");
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("refusing to rebuild"), std::string::npos) << refused.output;
  RewriteSlotWithItsDigest(*fs, params, (bad + 2) % 3, bucket, slot, seed + 1);
  const CliRun rebuilt = RunCli("rebuild -s " + fs->state + " --passfile " + fs->passfile +
                                " --server " + std::to_string((bad + 1) % 3) +
                                " --force --no-verify");
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    // Drive two evictions with writes to other blocks.
    for (std::uint32_t k = 0; k < 2 * params.evict_rate + 1; ++k) {
      const BlockId id = k % lost;
      const Status st = (*c)->Write(id, model.at(id));
      ASSERT_TRUE(st.ok()) << "write " << k << " of block " << id << ": " << st.ToString();
    }
    const auto after = AppliedEvictions(**c);
    EXPECT_GE(after[0], before[0] + 2) << "evictions stopped behind a value wrong at rest";
    auto got = (*c)->Read(lost);
    ASSERT_FALSE(got.ok()) << "a block whose every share was changed read back";
    EXPECT_EQ(got.status().code(), Status::Code::kIntegrity) << got.status().ToString();
  }
  const CliRun status = RunCli("status -s " + fs->state + " --passfile " + fs->passfile);
  EXPECT_NE(status.output.find("does not authenticate (share MAC)"), std::string::npos)
      << status.output;
  model.erase(lost);
  ExpectBlocks(fs->state, model);
}

}  // namespace
}  // namespace s3oram

// The server-fault suite (issue 22): one server's files are damaged while it
// is stopped (random bytes of a written data slot, of a root slot the
// protocol never writes, of a slot digest, of one copy of the store header,
// of a state-backup record), the filesystem is used on (writes, reads,
// syncs, evictions), then the repair the tools name is run. Over every seed:
//   - no read returns other bytes than were last written;
//   - every write that a later Sync acknowledged reads back after the repair;
//   - whatever names a server names the damaged one (errors, scrub);
//   - after `s3oram rebuild` of that server, scrub is clean, every block
//     reads back and further writes (with evictions) work;
//   - a damaged backup record leaves the backup restorable from the others,
//     the damaged server named.
// Seeds: S3ORAM_TEST_SEED + k for k < kSeeds, each printed; the kind of
// damage cycles with k so that every kind is met twice per run.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "oramcore/protocol/state_backup.h"
#include "oramcore/tree/geometry.h"
#include "tests/integration/cluster_fixture.h"
#include "tests/integration/run_cli.h"
#include "tests/integration/share_damage.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

namespace stdfs = std::filesystem;
using Model = std::map<BlockId, std::vector<std::uint8_t>>;

constexpr int kSeeds = 10;

enum class Damage { kDataSlot, kUnusedRootSlot, kDigest, kHeaderCopy, kBackupRecord };
const char* Name(Damage d) {
  switch (d) {
    case Damage::kDataSlot: return "a written data slot";
    case Damage::kUnusedRootSlot: return "a root slot the protocol never writes";
    case Damage::kDigest: return "a slot digest";
    case Damage::kHeaderCopy: return "one copy of the store header";
    case Damage::kBackupRecord: return "a state-backup record";
  }
  return "?";
}

using testing::CliRun;
using testing::RunCli;

void RunOneSeed(std::uint64_t seed, Damage kind) {
  std::mt19937_64 rng(seed);
  const OramParams params = testing::SmallParams(256, 4, 4);
  auto fs = testing::MakeFs(params, /*peer_timeout_ms=*/2000);
  ASSERT_TRUE(fs);
  const std::size_t bad = rng() % 3;
  const std::string dir = fs->cluster->dir() + "/data-" + std::to_string(bad);
  const std::uint64_t ids = 12;
  Model model;
  std::uint64_t backup_generation = 0;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (std::uint32_t k = 0; k < 3 * params.evict_rate + ids; ++k) {
      const BlockId id = k % ids;
      model[id] = testing::Content(params.block_bytes, id, rng());
      ASSERT_TRUE((*c)->Write(id, model[id]).ok());
    }
    ASSERT_TRUE((*c)->Sync().ok());
    auto b = BackupState(**c);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backup_generation = b->generation;
  }

  // The damage, while the server is stopped.
  ASSERT_TRUE(fs->cluster->Kill(bad, SIGTERM).ok());
  const std::string shares = dir + "/shares.bin";
  std::string where;
  switch (kind) {
    case Damage::kDataSlot:
      where = testing::DamageShareFile(shares, params, testing::ShareDamage::kDataSlot, rng);
      break;
    case Damage::kUnusedRootSlot:
      where = testing::DamageShareFile(shares, params, testing::ShareDamage::kUnusedRootSlot, rng);
      break;
    case Damage::kDigest:
      where = testing::DamageShareFile(shares, params, testing::ShareDamage::kDigest, rng);
      break;
    case Damage::kHeaderCopy:
      where = testing::DamageShareFile(shares, params, testing::ShareDamage::kHeaderCopy, rng);
      break;
    case Damage::kBackupRecord: {
      const std::string file = dir + "/backup-" + std::to_string(backup_generation) + ".bin";
      const auto size = stdfs::file_size(file);
      testing::FlipBytes(file, 32 + rng() % (size / 2), 16, rng);
      where = "backup generation " + std::to_string(backup_generation);
      break;
    }
  }
  std::printf("[ seed     ] %llu: server %zu, %s (%s)\n", static_cast<unsigned long long>(seed),
              bad, Name(kind), where.c_str());
  const Status restarted = fs->cluster->Restart(bad);
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();

  // Keep using it: writes, reads, syncs; evictions fall due on the way.
  Model synced = model;  // what the last successful Sync made durable
  std::string errors;
  std::size_t failed = 0, wrong = 0;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    if (!c.ok()) {
      errors += c.status().ToString() + "\n";
    } else {
      for (int k = 0; k < 4 * static_cast<int>(params.evict_rate); ++k) {
        const BlockId id = rng() % ids;
        if (rng() % 2 == 0) {
          auto content = testing::Content(params.block_bytes, id, rng());
          const Status st = (*c)->Write(id, content);
          if (st.ok()) {
            model[id] = content;
          } else {
            ++failed;
            errors += st.ToString() + "\n";
          }
        } else {
          auto got = (*c)->Read(id);
          if (got.ok()) {
            wrong += *got != model[id];
          } else {
            ++failed;
            errors += got.status().ToString() + "\n";
          }
        }
        if (k % 5 == 4) {
          if (Status s = (*c)->Sync(); s.ok()) synced = model;
        }
      }
      if (Status s = (*c)->Sync(); s.ok()) synced = model;
    }
  }
  EXPECT_EQ(wrong, 0u) << "a read returned other bytes than were written";
  std::printf("  while damaged: %zu accesses failed\n", failed);
  EXPECT_TRUE(testing::OtherServersNamed(errors, bad).empty()) << "an honest server was named:\n" << errors;

  const std::string common = " -s " + fs->state + " --passfile " + fs->passfile;
  const CliRun scrub = RunCli("scrub" + common + " --plain-progress");
  EXPECT_TRUE(testing::OtherServersNamed(scrub.output, bad).empty()) << scrub.output;
  if (scrub.exit_code == 4 && kind != Damage::kBackupRecord) {
    EXPECT_NE(scrub.output.find("server " + std::to_string(bad) + ": DAMAGED"), std::string::npos)
        << scrub.output;
    // s3oram status names the bad server too, whether a mount met the
    // damage or only scrub found it.
    const CliRun status = RunCli("status" + common);
    const std::size_t at = status.output.find("problem ");
    ASSERT_NE(at, std::string::npos) << status.output;
    const std::string line = status.output.substr(at, status.output.find('\n', at) - at);
    EXPECT_NE(line.find("server " + std::to_string(bad)), std::string::npos) << line;
    EXPECT_TRUE(testing::OtherServersNamed(line, bad).empty()) << line;
  }
  if (kind == Damage::kBackupRecord) {
    // The backup is restorable from the two others; the damaged one is named.
    RestoreOptions o;
    o.state_path = fs->dir.Sub("restored.s3oram");
    o.servers = fs->cluster->endpoints();
    o.server_keys = fs->cluster->server_public_keys();
    o.client_key_file = fs->cluster->client_key_file();
    o.generation = backup_generation;
    o.force = true;  // the servers moved on since (the accesses above)
    auto r = RestoreState(o, testing::TestPassphrase());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::string warnings;
    for (const auto& w : r->warnings) warnings += w + "\n";
    EXPECT_NE(warnings.find("server " + std::to_string(bad)), std::string::npos) << warnings;
  }

  // The repair: rebuild the damaged server (the operator knows which disk).
  const CliRun rebuilt = RunCli("rebuild" + common + " --server " + std::to_string(bad) +
                                " --force --plain-progress");
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;
  const CliRun clean = RunCli("scrub" + common + " --plain-progress");
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const auto& [id, want] : synced) {
    auto got = (*c)->Read(id);
    ASSERT_TRUE(got.ok()) << "block " << id << " lost: " << got.status().ToString();
    // Writes after the last successful Sync may or may not be there; the
    // synced ones must, unless a later unsynced write replaced them.
    EXPECT_TRUE(*got == want || *got == model[id]) << "block " << id;
  }
  for (std::uint32_t k = 0; k < 2 * params.evict_rate; ++k) {
    const BlockId id = k % ids;
    model[id] = testing::Content(params.block_bytes, id, rng());
    const Status st = (*c)->Write(id, model[id]);
    ASSERT_TRUE(st.ok()) << "after the repair: " << st.ToString();
  }
  for (const auto& [id, want] : model) {
    auto got = (*c)->Read(id);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, want) << "block " << id;
  }
}

TEST(ServerFaultTest, DamageOnOneServerLosesNothingSyncedAndIsRepaired) {
  const std::uint64_t base = testing::TestSeed();
  const Damage kinds[] = {Damage::kDataSlot, Damage::kUnusedRootSlot, Damage::kDigest,
                          Damage::kHeaderCopy, Damage::kBackupRecord};
  for (int k = 0; k < kSeeds; ++k) {
    SCOPED_TRACE("seed " + std::to_string(base + k));
    RunOneSeed(base + k, kinds[k % 5]);
    if (::testing::Test::HasFatalFailure()) return;
  }
  std::printf("[ cases    ] %d seeds, %d kinds of damage, each kind twice\n", kSeeds, 5);
}

// Damage no mount has met yet: only scrub finds it, and s3oram status must
// name the damaged server (and no other) from then on, until the repair.
TEST(ServerFaultTest, DamageOnlyScrubFoundIsNamedByStatusUntilRepaired) {
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const OramParams params = testing::SmallParams(256, 4, 4);
  auto fs = testing::MakeFs(params, /*peer_timeout_ms=*/2000);
  ASSERT_TRUE(fs);
  const std::size_t bad = rng() % 3;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (std::uint32_t k = 0; k < 3 * params.evict_rate; ++k) {
      ASSERT_TRUE((*c)->Write(k % 8, testing::Content(params.block_bytes, k % 8, rng())).ok());
    }
    ASSERT_TRUE((*c)->Sync().ok());
  }
  ASSERT_TRUE(fs->cluster->Kill(bad, SIGTERM).ok());
  const std::string where =
      testing::DamageShareFile(fs->cluster->dir() + "/data-" + std::to_string(bad) + "/shares.bin",
                               params, testing::ShareDamage::kDataSlot, rng);
  std::printf("[ seed     ] %llu: server %zu, %s\n", static_cast<unsigned long long>(seed), bad,
              where.c_str());
  ASSERT_TRUE(fs->cluster->Restart(bad).ok());

  const std::string common = " -s " + fs->state + " --passfile " + fs->passfile;
  const CliRun before = RunCli("status" + common);
  ASSERT_EQ(before.output.find("problem "), std::string::npos) << before.output;
  const CliRun scrub = RunCli("scrub" + common + " --plain-progress");
  ASSERT_EQ(scrub.exit_code, 4) << scrub.output;
  const CliRun status = RunCli("status" + common);
  const std::size_t at = status.output.find("problem ");
  ASSERT_NE(at, std::string::npos) << status.output;
  const std::string line = status.output.substr(at, status.output.find('\n', at) - at);
  EXPECT_NE(line.find("server " + std::to_string(bad) + " has damaged storage"), std::string::npos)
      << line;
  EXPECT_NE(line.find("rebuild --server " + std::to_string(bad)), std::string::npos) << line;
  EXPECT_TRUE(testing::OtherServersNamed(line, bad).empty()) << line;

  const CliRun rebuilt =
      RunCli("rebuild" + common + " --server " + std::to_string(bad) + " --plain-progress");
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;
  ASSERT_EQ(RunCli("scrub" + common + " --plain-progress").exit_code, 0);
  const CliRun after = RunCli("status" + common);
  EXPECT_EQ(after.output.find("problem "), std::string::npos) << after.output;
}

// Fail-stop: once a server has reported damaged storage, the client starts
// no eviction and takes no write until that server is repaired, also after
// it is opened again; reads that avoid the damage go on while the root has
// room. (Without the stop, the write below succeeds and evictions run on,
// one of which may overwrite the damaged slot and hide the damage.)
TEST(ServerFaultTest, DamageMetStopsEvictionsAndWritesUntilRepaired) {
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const OramParams params = testing::SmallParams(256, 4, 4);
  const TreeGeometry geo = params.geometry();
  auto fs = testing::MakeFs(params, /*peer_timeout_ms=*/2000);
  ASSERT_TRUE(fs);
  const std::size_t bad = rng() % 3;
  const std::uint64_t ids = 12;
  Model model;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    // A multiple of A accesses: the last one runs an eviction, so the root
    // is empty (nr = 0) when the damage is met.
    for (std::uint32_t k = 0; k < 6 * params.evict_rate; ++k) {
      const BlockId id = k % ids;
      model[id] = testing::Content(params.block_bytes, id, rng());
      ASSERT_TRUE((*c)->Write(id, model[id]).ok());
    }
    ASSERT_TRUE((*c)->Sync().ok());
  }
  // X: a live block below the root; Y: one whose path avoids X's bucket.
  BlockId x = kNoBlock, y = kNoBlock;
  BucketId damaged_bucket = 0;
  std::uint32_t damaged_slot = 0;
  {
    auto store = testing::TestOpenStore(fs->state);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto pm = (*store)->LoadPositionMap();
    ASSERT_TRUE(pm.ok()) << pm.status().ToString();
    for (BlockId id = 0; id < ids && x == kNoBlock; ++id) {
      const PositionEntry* e = pm->Find(id);
      if (e != nullptr && e->pos.level > 0) {
        x = id;
        damaged_bucket = geo.BucketOnPath(e->pos.leaf, e->pos.level);
        damaged_slot = e->pos.slot;
      }
    }
    ASSERT_NE(x, kNoBlock) << "no block below the root after " << 6 * params.evict_rate
                           << " writes";
    const std::uint32_t level = pm->Find(x)->pos.level;
    for (BlockId id = 0; id < ids; ++id) {
      const PositionEntry* e = pm->Find(id);
      if (id != x && e != nullptr && geo.BucketOnPath(e->pos.leaf, level) != damaged_bucket) y = id;
    }
    ASSERT_NE(y, kNoBlock) << "every live block's path crosses bucket " << damaged_bucket;
  }
  ASSERT_TRUE(fs->cluster->Kill(bad, SIGTERM).ok());
  const std::string shares = fs->cluster->dir() + "/data-" + std::to_string(bad) + "/shares.bin";
  testing::FlipBytes(shares,
                     testing::BucketInFile(shares, damaged_bucket).data +
                         std::uint64_t{damaged_slot} * params.slot_bytes() +
                         rng() % (params.slot_bytes() - 16),
                     16, rng);
  std::printf("[ seed     ] %llu: server %zu, bucket %llu slot %u (block %llu); reads of %llu\n",
              static_cast<unsigned long long>(seed), bad,
              static_cast<unsigned long long>(damaged_bucket), damaged_slot,
              static_cast<unsigned long long>(x), static_cast<unsigned long long>(y));
  ASSERT_TRUE(fs->cluster->Restart(bad).ok());

  std::vector<std::uint64_t> applied_before;
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_FALSE((*c)->writes_stopped());
    for (const auto& r : (*c)->QueryServers(std::chrono::milliseconds(10000))) {
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      applied_before.push_back(r.reply.applied_evictions);
    }
    auto rx = (*c)->Read(x);
    ASSERT_FALSE(rx.ok()) << "the read through the damaged slot succeeded";
    ASSERT_EQ(rx.status().code(), Status::Code::kDamaged) << rx.status().ToString();
    EXPECT_NE(rx.status().message().find("server " + std::to_string(bad)), std::string::npos)
        << rx.status().ToString();
    ASSERT_TRUE((*c)->writes_stopped());
    // Writes and updates are refused; nothing is written.
    const Status w = (*c)->Write(y, testing::Content(params.block_bytes, y, rng()));
    EXPECT_EQ(w.code(), Status::Code::kDamaged) << w.ToString();
    EXPECT_NE(w.message().find("writes are stopped"), std::string::npos) << w.ToString();
    auto u = (*c)->Update(y, [](std::span<std::uint8_t> b) { b[0] ^= 1; });
    EXPECT_EQ(u.status().code(), Status::Code::kDamaged) << u.status().ToString();
    // A read that avoids the damage works (the root is empty: nr = 0).
    auto ry = (*c)->Read(y);
    ASSERT_TRUE(ry.ok()) << ry.status().ToString();
    EXPECT_EQ(*ry, model[y]);
    // Reads go on until the root is full, then fail with the stop: no
    // eviction runs. A read whose random path crosses the damage fails
    // without taking a root slot (a quarter of them, and every read of x),
    // so the bound is generous: with 2A reads the root stayed short of full
    // in about one run of twelve.
    bool stopped_read = false;
    for (std::uint32_t k = 0; k < 16 * params.evict_rate && !stopped_read; ++k) {
      const BlockId id = rng() % ids;
      auto r = (*c)->Read(id);
      if (r.ok()) {
        EXPECT_EQ(*r, model[id]) << "block " << id;
      } else {
        ASSERT_EQ(r.status().code(), Status::Code::kDamaged) << r.status().ToString();
        stopped_read = r.status().message().find("writes are stopped") != std::string::npos;
      }
    }
    EXPECT_TRUE(stopped_read) << "reads went on past a full root";
    const auto reports = (*c)->QueryServers(std::chrono::milliseconds(10000));
    for (std::size_t i = 0; i < reports.size(); ++i) {
      ASSERT_TRUE(reports[i].status.ok()) << reports[i].status.ToString();
      EXPECT_EQ(reports[i].reply.applied_evictions, applied_before[i])
          << "server " << i << " ran an eviction while writes were stopped";
    }
  }
  // Opened again, the client is still stopped (the state records the
  // damage), and s3oram status says so.
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE((*c)->writes_stopped());
    EXPECT_EQ((*c)->Write(y, model[y]).code(), Status::Code::kDamaged);
  }
  const std::string common = " -s " + fs->state + " --passfile " + fs->passfile;
  const CliRun status = RunCli("status" + common);
  EXPECT_NE(status.output.find("writes      STOPPED"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("server " + std::to_string(bad) + " has damaged storage"),
            std::string::npos)
      << status.output;

  // The repair the error names ends the stop: block X is whole again,
  // writes and evictions work.
  const CliRun rebuilt =
      RunCli("rebuild" + common + " --server " + std::to_string(bad) + " --plain-progress");
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;
  EXPECT_EQ(RunCli("status" + common).output.find("STOPPED"), std::string::npos);
  {
    auto c = testing::TestOpen(fs->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_FALSE((*c)->writes_stopped());
    for (std::uint32_t k = 0; k < 3 * params.evict_rate; ++k) {
      const BlockId id = k % ids;
      model[id] = testing::Content(params.block_bytes, id, rng());
      ASSERT_TRUE((*c)->Write(id, model[id]).ok()) << "write " << k;
    }
    for (const auto& [id, bytes] : model) {
      auto r = (*c)->Read(id);
      ASSERT_TRUE(r.ok()) << "block " << id << ": " << r.status().ToString();
      EXPECT_EQ(*r, bytes) << "block " << id;
    }
    const auto reports = (*c)->QueryServers(std::chrono::milliseconds(10000));
    for (std::size_t i = 0; i < reports.size(); ++i) {
      ASSERT_TRUE(reports[i].status.ok());
      EXPECT_GT(reports[i].reply.applied_evictions, applied_before[i]) << "server " << i;
    }
  }
}

}  // namespace
}  // namespace s3oram

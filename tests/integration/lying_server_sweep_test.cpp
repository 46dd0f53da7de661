// Issue 42, the lying-server sweep: one table of everything a server keeps
// or says, and for each entry the edit a server that lies can make with its
// own keys (bytes changed through its own store, so digests and checksums
// are recomputed; counters raised; old copies put back; the liar build's
// wrong answers). Each entry runs the same story against real servers:
//   1. history: blocks written past an eviction, a backup, more blocks and a
//      second backup; a copy of the liar's data directory is kept between;
//   2. the edit, server `seed % 3` stopped meanwhile (or the liar build);
//   3. use: open, read every block, write new ones through two evictions,
//      back up (each step may be refused: that is the liar's power);
//   4. diagnosis: the refusals, `s3oram scrub` and `s3oram status`;
//   5. repair: the liar honest again, `s3oram rebuild --server N --force`;
//   6. afterwards everything works.
// What every entry asserts:
//   - no read returns other bytes than were written (at any step);
//   - no honest server is ever named for a repair;
//   - the entries marked `named` name the liar with its repair;
//   - after the repair every block whose write succeeded reads back, new
//     writes and evictions go on, a backup is made and scrub is clean: no
//     fsynced byte lost, no lockout.
// Positions, values and the liar are drawn from the printed seed. CI runs
// every entry once; S3ORAM_SWEEP_ROUNDS=N repeats each with N seeds (the
// longer run of docs/RELIABILITY.md). New structures join the table.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/protocol/state_backup.h"
#include "oramcore/tree/geometry.h"
#include "serverd/backup_store.h"
#include "serverd/lease_file.h"
#include "serverd/share_store.h"
#include "tests/integration/cluster_fixture.h"
#include "tests/integration/run_cli.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using field::Elem;
using testing::CliRun;
using testing::RunCli;
using Model = std::map<BlockId, std::vector<std::uint8_t>>;
namespace stdfs = std::filesystem;

enum class Edit {
  // shares.bin, through the liar's own store (digests recomputed)
  kLiveRootSlot,         // a root slot holding a live block
  kLiveTreeSlot,         // a slot below the root holding a live block
  kEmptyTreeSlot,        // a slot of the same bucket holding none
  kRootSnapshot,         // root.bin planted for the next eviction, one live slot changed
  kPlantedShadow,        // a sealed shadow of wrong buckets for the next eviction
  kMetaEvictionsAhead,   // header: applied_evictions + 1
  kMetaEvictionsBehind,  // header: applied_evictions - 1
  kMetaSeqAhead,         // header: applied_seq + 2^40
  // lease record (its BLAKE2b recomputed)
  kLeaseEpochAhead,  // highest epoch 2^64 - 2
  kLeaseRolledBack,  // the record of before the second backup put back
  // backups
  kBackupGenerationAhead,  // the newest copied to generation 2^64 - 2
  kBackupNewestDropped,    // the newest generation deleted (an old copy is what is left)
  kBackupRecordChanged,    // bytes of the newest backup's share changed
  // everything at once
  kWholeDirectoryRolledBack,  // the data directory of before the second backup
  // answers (the s3oram-serverd-liar build, serverd/lie.h)
  kLieRetrieve,
  kLieSmpConsistent,
  kLieSmpInconsistent,
  kLieShadow,
  kLieCounters,
};

struct Entry {
  const char* name;
  Edit edit;
  // The liar is named (with `--server N`) by a refusal, scrub or status.
  bool named;
};

const Entry kTable[] = {
    {"LiveRootSlot", Edit::kLiveRootSlot, true},
    {"LiveTreeSlot", Edit::kLiveTreeSlot, true},
    {"EmptyTreeSlot", Edit::kEmptyTreeSlot, true},
    {"RootSnapshot", Edit::kRootSnapshot, true},
    {"PlantedShadow", Edit::kPlantedShadow, false},
    {"MetaEvictionsAhead", Edit::kMetaEvictionsAhead, true},
    {"MetaEvictionsBehind", Edit::kMetaEvictionsBehind, true},
    {"MetaSeqAhead", Edit::kMetaSeqAhead, true},
    {"LeaseEpochAhead", Edit::kLeaseEpochAhead, true},
    {"LeaseRolledBack", Edit::kLeaseRolledBack, false},
    {"BackupGenerationAhead", Edit::kBackupGenerationAhead, true},
    {"BackupNewestDropped", Edit::kBackupNewestDropped, false},
    {"BackupRecordChanged", Edit::kBackupRecordChanged, false},
    {"WholeDirectoryRolledBack", Edit::kWholeDirectoryRolledBack, true},
    {"LieRetrieve", Edit::kLieRetrieve, false},
    {"LieSmpConsistent", Edit::kLieSmpConsistent, false},
    {"LieSmpInconsistent", Edit::kLieSmpInconsistent, false},
    {"LieShadow", Edit::kLieShadow, false},
    {"LieCounters", Edit::kLieCounters, true},
};

// CRC-32C, as the share file's header records use it (serverd/share_store_format.h).
std::uint32_t Crc32c(const std::uint8_t* p, std::size_t n) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

// Sets applied_evictions (offset 72) in both header copies of a stopped
// server's shares.bin (at 0 and 512), each checksum (offset 112, over the
// 112 bytes before it) recomputed.
void RewriteAppliedEvictions(const std::string& shares, std::uint64_t value) {
  std::fstream f(shares, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << shares;
  for (std::streamoff copy : {0, 512}) {
    std::uint8_t rec[116];
    f.seekg(copy);
    f.read(reinterpret_cast<char*>(rec), sizeof rec);
    ASSERT_EQ(Crc32c(rec, 112), std::uint32_t{rec[112]} | std::uint32_t{rec[113]} << 8 |
                                    std::uint32_t{rec[114]} << 16 | std::uint32_t{rec[115]} << 24)
        << "the header layout changed: update this test";
    for (int b = 0; b < 8; ++b) rec[72 + b] = static_cast<std::uint8_t>(value >> (8 * b));
    const std::uint32_t crc = Crc32c(rec, 112);
    for (int b = 0; b < 4; ++b) rec[112 + b] = static_cast<std::uint8_t>(crc >> (8 * b));
    f.seekp(copy);
    f.write(reinterpret_cast<const char*>(rec), sizeof rec);
  }
  ASSERT_TRUE(f.good());
}

std::string Liar() {
  const char* env = std::getenv("S3ORAM_SERVERD_LIAR");
  return env && *env ? env : S3ORAM_TEST_SERVERD_LIAR;
}

const char* LieKind(Edit e) {
  switch (e) {
    case Edit::kLieRetrieve:
      return "retrieve";
    case Edit::kLieSmpConsistent:
      return "smp-consistent";
    case Edit::kLieSmpInconsistent:
      return "smp-inconsistent";
    case Edit::kLieShadow:
      return "shadow";
    case Edit::kLieCounters:
      return "counters";
    default:
      return nullptr;
  }
}

class Story {
 public:
  Story(const Entry& entry, std::uint64_t seed)
      : entry_(entry), seed_(seed), liar_(seed % 3), rng_(seed) {}

  void Run() {
    std::printf("[ seed     ] %llu: %s on server %zu\n", static_cast<unsigned long long>(seed_),
                entry_.name, liar_);
    fs_ = testing::MakeFs(params_, /*peer_timeout_ms=*/3000);
    ASSERT_TRUE(fs_);
    History();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ApplyEdit();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    Use();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    Diagnose();
    Repair();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    Afterwards();
  }

 private:
  std::string DataDir() const { return fs_->cluster->dir() + "/data-" + std::to_string(liar_); }
  std::string Auth() const { return " -s " + fs_->state + " --passfile " + fs_->passfile; }

  std::vector<std::uint8_t> Content(BlockId id, std::uint64_t round) const {
    return testing::Content(params_.block_bytes, id, seed_ * 31 + round);
  }

  // Reads every block of the model; a read either fails or returns exactly
  // what was written (`uncertain` blocks: one of the contents listed).
  void ReadAll(OramClient& c, bool must_succeed) {
    for (const auto& [id, want] : model_) {
      auto got = c.Read(id);
      if (!got.ok()) {
        EXPECT_FALSE(must_succeed) << "block " << id << ": " << got.status().ToString();
        Remember(got.status());
        continue;
      }
      ASSERT_EQ(*got, want) << "block " << id << ": other bytes than were written";
    }
    for (const auto& [id, choices] : uncertain_) {
      auto got = c.Read(id);
      if (!got.ok()) {
        EXPECT_FALSE(must_succeed) << "block " << id << ": " << got.status().ToString();
        continue;
      }
      bool known = false;
      for (const auto& ch : choices) known = known || *got == ch;
      ASSERT_TRUE(known) << "block " << id << ": neither its old nor its new content";
    }
  }

  // Writes `count` blocks from `first` with round `round`'s contents; a
  // failed write leaves the block uncertain (old or new content).
  void WriteRange(OramClient& c, BlockId first, std::uint64_t count, std::uint64_t round) {
    for (BlockId id = first; id < first + count; ++id) {
      const auto content = Content(id, round);
      const Status st = c.Write(id, content);
      if (st.ok() && !uncertain_.count(id)) {
        model_[id] = content;
        continue;
      }
      Remember(st);
      auto& choices = uncertain_[id];
      if (auto it = model_.find(id); it != model_.end()) {
        choices.push_back(it->second);
        model_.erase(it);
      } else if (choices.empty()) {
        choices.push_back(std::vector<std::uint8_t>(params_.block_bytes, 0));
      }
      choices.push_back(content);
    }
  }

  void Remember(const Status& st) {
    if (!st.ok()) said_ += st.ToString() + "\n";
  }

  void StopLiar() { ASSERT_TRUE(fs_->cluster->Kill(liar_, SIGTERM).ok()); }
  void StartLiar(const std::string& lie = "") {
    const Status st = lie.empty() ? fs_->cluster->Restart(liar_)
                                  : fs_->cluster->Restart(liar_, {"S3ORAM_LIE=" + lie}, Liar());
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  void Backup(OramClient& c, bool must_succeed) {
    auto b = BackupState(c);
    if (must_succeed) {
      ASSERT_TRUE(b.ok()) << b.status().ToString();
    }
    if (!b.ok()) Remember(b.status());
  }

  // 1. Blocks 0..A+1 (past one eviction; the last in the root), a backup,
  // a copy of the liar's directory, blocks A+2..2A+2 and a second backup.
  void History() {
    const std::uint32_t A = params_.evict_rate;
    {
      auto c = testing::TestOpen(fs_->state, testing::FastRetryOptions());
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      WriteRange(**c, 0, A + 2, 0);
      ASSERT_TRUE(uncertain_.empty()) << said_;
      ASSERT_TRUE((*c)->Read(0).ok());  // lands the deferred root write
      Backup(**c, true);
    }
    StopLiar();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    old_copy_ = fs_->dir.Sub("old-data");
    stdfs::copy(DataDir(), old_copy_, stdfs::copy_options::recursive);
    StartLiar();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    auto c = testing::TestOpen(fs_->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    // A + 1 more (and a read): the root holds live blocks at the end.
    WriteRange(**c, A + 2, A + 1, 0);
    ASSERT_TRUE(uncertain_.empty()) << said_;
    ASSERT_TRUE((*c)->Read(0).ok());
    Backup(**c, true);
    const PositionMap& pm = (*c)->position_map();
    const TreeGeometry geo = params_.geometry();
    for (const auto& [id, content] : model_) {
      const PositionEntry* e = pm.Find(id);
      ASSERT_NE(e, nullptr);
      const std::uint64_t bucket = geo.BucketOnPath(e->pos.leaf, e->pos.level);
      occupied_[bucket].push_back(e->pos.slot);
    }
    next_eviction_ = (*c)->counters().ne;
  }

  // A live slot: in the root (level 0) or below it.
  std::pair<std::uint64_t, std::uint32_t> LiveSlot(bool root) {
    std::vector<std::pair<std::uint64_t, std::uint32_t>> found;
    for (const auto& [bucket, slots] : occupied_) {
      if ((bucket == 1) != root) continue;
      for (std::uint32_t s : slots) found.emplace_back(bucket, s);
    }
    EXPECT_FALSE(found.empty()) << (root ? "no live root slot" : "no live slot below the root");
    return found.empty() ? std::pair<std::uint64_t, std::uint32_t>{1, 0}
                         : found[rng_() % found.size()];
  }

  // The buckets below the root on eviction `eviction`'s path.
  std::vector<std::uint64_t> PathBelowRoot(std::uint64_t eviction) const {
    const TreeGeometry geo = params_.geometry();
    const LeafId leaf = geo.EvictionLeaf(eviction);
    std::vector<std::uint64_t> buckets;
    for (std::uint32_t level = 1; level <= params_.height; ++level) {
      buckets.push_back(geo.BucketOnPath(leaf, level));
    }
    return buckets;
  }

  static std::vector<Elem> Changed(std::span<const Elem> slot, std::mt19937_64& rng) {
    std::vector<Elem> x(slot.begin(), slot.end());
    const std::size_t at = rng() % x.size();
    x[at] = field::Add(x[at], 1 + static_cast<Elem>(rng() % (field::kPrime - 1)));
    return x;
  }

  std::string NewestBackup() const {
    std::uint64_t newest = 0;
    for (const auto& e : stdfs::directory_iterator(DataDir())) {
      const std::string n = e.path().filename().string();
      if (n.rfind("backup-", 0) != 0 || n.size() < 12 || n.substr(n.size() - 4) != ".bin") continue;
      const std::string digits = n.substr(7, n.size() - 11);
      if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
      newest = std::max<std::uint64_t>(newest, std::stoull(digits));
    }
    EXPECT_GT(newest, 0u) << "server " << liar_ << " holds no backup";
    return DataDir() + "/backup-" + std::to_string(newest) + ".bin";
  }

  // 2.
  void ApplyEdit() {
    if (const char* lie = LieKind(entry_.edit)) {
      StopLiar();
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
      StartLiar(lie);
      return;
    }
    StopLiar();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    EditStopped();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    StartLiar();
  }

  void EditStopped() {
    const Edit e = entry_.edit;
    if (e == Edit::kLeaseEpochAhead || e == Edit::kLeaseRolledBack) {
      auto lease = serverd::LoadLease(e == Edit::kLeaseRolledBack ? old_copy_ : DataDir());
      ASSERT_TRUE(lease.ok()) << lease.status().ToString();
      serverd::LeaseRecord forged = *lease;
      if (e == Edit::kLeaseEpochAhead) forged.highest_epoch = UINT64_MAX - 1;
      ASSERT_TRUE(serverd::SaveLease(DataDir(), forged, /*sync=*/true).ok());
      return;
    }
    if (e == Edit::kWholeDirectoryRolledBack) {
      stdfs::remove_all(DataDir());
      stdfs::copy(old_copy_, DataDir(), stdfs::copy_options::recursive);
      return;
    }
    if (e == Edit::kBackupRecordChanged) {
      // Through the liar's own backup store, so the record digests match:
      // the newest generation read, one element changed, stored again.
      auto backups = serverd::BackupStore::Open(DataDir());
      ASSERT_TRUE(backups.ok()) << backups.status().ToString();
      const auto list = (*backups)->List();
      ASSERT_FALSE(list.empty());
      const wire::BackupInfo newest = list.back();
      std::vector<Elem> share;
      std::uint64_t total = 0;
      while (share.size() < newest.elems) {
        auto got = (*backups)->Get(newest.generation, share.size(), 1 << 16, &total);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        ASSERT_FALSE(got->empty());
        share.insert(share.end(), got->begin(), got->end());
      }
      const std::size_t at = rng_() % share.size();
      share[at] = field::Add(share[at], 1 + static_cast<Elem>(rng_() % (field::kPrime - 1)));
      backups->reset();
      stdfs::remove(DataDir() + "/backup-" + std::to_string(newest.generation) + ".bin");
      backups = serverd::BackupStore::Open(DataDir());
      ASSERT_TRUE(backups.ok()) << backups.status().ToString();
      auto put = (*backups)->Put(newest.generation, 0, share.size(), /*last=*/true, share,
                                 newest.key_epoch);
      ASSERT_TRUE(put.ok()) << put.status().ToString();
      std::printf("server %zu changes element %zu of its backup generation %llu\n", liar_, at,
                  static_cast<unsigned long long>(newest.generation));
      return;
    }
    if (e == Edit::kBackupGenerationAhead || e == Edit::kBackupNewestDropped) {
      const std::string newest = NewestBackup();
      if (e == Edit::kBackupNewestDropped) {
        stdfs::remove(newest);
        return;
      }
      const std::string target = DataDir() + "/backup-" + std::to_string(UINT64_MAX - 1) + ".bin";
      stdfs::copy_file(newest, target);
      std::fstream f(target, std::ios::in | std::ios::out | std::ios::binary);
      ASSERT_TRUE(f.good()) << target;
      char gen[8];
      for (int b = 0; b < 8; ++b) gen[b] = static_cast<char>((UINT64_MAX - 1) >> (8 * b));
      f.seekp(8);  // magic, version, then the generation (serverd/backup_store.h)
      f.write(gen, sizeof gen);
      ASSERT_TRUE(f.good());
      return;
    }
    auto store = serverd::ShareStore::Open(DataDir());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    serverd::ShareStore& s = **store;
    const std::size_t m = s.tree().slot_elems();
    serverd::ServerMeta meta = s.meta();
    auto rewrite = [&](std::uint64_t bucket, std::uint32_t slot) {
      const Elem* at = s.tree().Bucket(bucket) + slot * m;
      const std::vector<Elem> x = Changed(std::span(at, m), rng_);
      ASSERT_TRUE(s.tree().WriteSlot(bucket, slot, x, meta.applied_seq, meta.epoch).ok());
      std::printf("server %zu rewrites bucket %llu slot %u (digest recomputed)\n", liar_,
                  static_cast<unsigned long long>(bucket), slot);
    };
    switch (e) {
      case Edit::kLiveRootSlot: {
        const auto [b, slot] = LiveSlot(true);
        rewrite(b, slot);
        break;
      }
      case Edit::kLiveTreeSlot: {
        const auto [b, slot] = LiveSlot(false);
        rewrite(b, slot);
        break;
      }
      case Edit::kEmptyTreeSlot: {
        const auto [b, live] = LiveSlot(false);
        const auto& used = occupied_[b];
        std::uint32_t slot = static_cast<std::uint32_t>(rng_() % params_.bucket_size);
        for (std::uint32_t k = 0;
             k < params_.bucket_size && std::find(used.begin(), used.end(), slot) != used.end();
             ++k) {
          slot = (slot + 1) % params_.bucket_size;
        }
        ASSERT_EQ(std::find(used.begin(), used.end(), slot), used.end()) << "a full bucket";
        rewrite(b, slot);
        break;
      }
      case Edit::kRootSnapshot: {
        // The live slot changed, copied into root.bin for the next eviction
        // (digests and all), and put back: only root.bin is wrong.
        const auto [b, slot] = LiveSlot(true);
        const std::vector<Elem> original(s.tree().Bucket(1) + slot * m,
                                         s.tree().Bucket(1) + (slot + 1) * m);
        const std::vector<Elem> x = Changed(original, rng_);
        ASSERT_TRUE(s.tree().WriteSlot(1, slot, x, meta.applied_seq, meta.epoch).ok());
        ASSERT_TRUE(s.shadow().SnapshotRoot(meta.applied_evictions).ok());
        ASSERT_TRUE(s.tree().WriteSlot(1, slot, original, meta.applied_seq, meta.epoch).ok());
        std::printf("server %zu plants root.bin for eviction %llu, slot %u changed\n", liar_,
                    static_cast<unsigned long long>(meta.applied_evictions), slot);
        break;
      }
      case Edit::kPlantedShadow: {
        const std::vector<std::uint64_t> buckets = PathBelowRoot(meta.applied_evictions);
        ASSERT_TRUE(s.shadow().BeginShadow(meta.applied_evictions, 1, buckets).ok());
        std::vector<Elem> junk(s.tree().bucket_elems());
        for (Elem& v : junk) v = static_cast<Elem>(rng_() % field::kPrime);
        for (std::size_t i = 0; i < buckets.size(); ++i) {
          ASSERT_TRUE(s.shadow().PutShadowBucket(i, junk).ok());
        }
        ASSERT_TRUE(s.shadow().SealShadow().ok());
        break;
      }
      case Edit::kMetaEvictionsAhead: {
        // The next eviction claimed done without computing it: a shadow of
        // the path's buckets as they are, sealed and committed.
        const std::vector<std::uint64_t> buckets = PathBelowRoot(meta.applied_evictions);
        ASSERT_TRUE(s.shadow().BeginShadow(meta.applied_evictions, 1, buckets).ok());
        std::vector<Elem> same(s.tree().bucket_elems());
        for (std::size_t i = 0; i < buckets.size(); ++i) {
          ASSERT_TRUE(s.tree().ReadBucket(buckets[i], same).ok());
          ASSERT_TRUE(s.shadow().PutShadowBucket(i, same).ok());
        }
        ASSERT_TRUE(s.shadow().SealShadow().ok());
        ASSERT_TRUE(s.shadow().Commit(meta.applied_evictions, meta.applied_seq, meta.epoch).ok());
        std::printf("server %zu claims eviction %llu applied without computing it\n", liar_,
                    static_cast<unsigned long long>(meta.applied_evictions));
        break;
      }
      case Edit::kMetaEvictionsBehind: {
        // The store refuses to move it back; the liar writes its header
        // itself, checksums recomputed (the bucket map's older copy is of
        // that count).
        ASSERT_GT(meta.applied_evictions, 0u);
        const std::uint64_t claimed = meta.applied_evictions - 1;
        store->reset();
        RewriteAppliedEvictions(DataDir() + "/shares.bin", claimed);
        std::printf("server %zu claims %llu evictions applied (it has %llu)\n", liar_,
                    static_cast<unsigned long long>(claimed),
                    static_cast<unsigned long long>(meta.applied_evictions));
        break;
      }
      case Edit::kMetaSeqAhead:
        meta.applied_seq += std::uint64_t{1} << 40;
        ASSERT_TRUE(s.tree().UpdateMeta(meta).ok());
        break;
      default:
        FAIL() << "no edit for " << entry_.name;
    }
  }

  // 3.
  void Use() {
    const std::uint32_t A = params_.evict_rate;
    // First a restore on a new machine, of the backups as the edit left
    // them: the newest backup t + 1 servers agree on (or a refusal naming
    // the liar), never one the liar made up.
    std::string args = "restore -s " + fs_->dir.Sub("restored.s3oram") + " --passfile " +
                       fs_->passfile + " --client-key " + fs_->cluster->client_key_file();
    for (std::size_t i = 0; i < 3; ++i) {
      args += " --server " + fs_->cluster->endpoints()[i] + " --server-key " +
              fs_->cluster->server_public_key_file(i);
    }
    const CliRun restore = RunCli(args);
    said_ += restore.output;
    if (restore.exit_code == 0) {
      EXPECT_EQ(restore.output.find("from backup generation " + std::to_string(UINT64_MAX - 1)),
                std::string::npos)
          << "restored the generation the liar made up: " << restore.output;
      auto restored = testing::TestOpenStore(fs_->dir.Sub("restored.s3oram"));
      ASSERT_TRUE(restored.ok()) << restored.status().ToString();
    }
    auto c = testing::TestOpen(fs_->state, testing::FastRetryOptions());
    if (!c.ok()) {
      Remember(c.status());
      return;
    }
    ReadAll(**c, /*must_succeed=*/false);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    WriteRange(**c, 2 * A + 3, 2 * A + 1, 1);
    ReadAll(**c, /*must_succeed=*/false);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    Backup(**c, false);
  }

  // 4. What a user is told names the liar (for `named` entries) and never
  // an honest server for a repair.
  void Diagnose() {
    const CliRun scrub = RunCli("scrub" + Auth() + " --plain-progress");
    const CliRun status = RunCli("status" + Auth());
    said_ += scrub.output + status.output;
    for (std::size_t i = 0; i < 3; ++i) {
      if (i == liar_) continue;
      EXPECT_EQ(said_.find("--server " + std::to_string(i)), std::string::npos)
          << "an honest server is named for repair:\n"
          << said_;
    }
    if (entry_.named) {
      EXPECT_NE(said_.find("--server " + std::to_string(liar_)), std::string::npos)
          << "the liar is not named with its repair:\n"
          << said_;
    }
  }

  // 5.
  void Repair() {
    if (LieKind(entry_.edit)) {
      StopLiar();
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
      StartLiar();
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
    }
    const CliRun rebuilt =
        RunCli("rebuild" + Auth() + " --server " + std::to_string(liar_) + " --force --no-verify");
    ASSERT_EQ(rebuilt.exit_code, 0) << said_ << rebuilt.output;
  }

  // 6.
  void Afterwards() {
    const std::uint32_t A = params_.evict_rate;
    auto c = testing::TestOpen(fs_->state, testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString() << "\n" << said_;
    ReadAll(**c, /*must_succeed=*/true);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    const std::uint64_t ne = (*c)->counters().ne;
    uncertain_.clear();
    for (std::uint32_t k = 0; k < 2 * A + 1; ++k) {
      const BlockId id = k % (4 * A);
      const auto content = Content(id, 2);
      const Status st = (*c)->Write(id, content);
      ASSERT_TRUE(st.ok()) << "write " << k << " of block " << id << ": " << st.ToString();
      model_[id] = content;
    }
    EXPECT_GE((*c)->counters().ne, ne + 2) << "evictions do not go on";
    ReadAll(**c, /*must_succeed=*/true);
    Backup(**c, true);
    c->reset();
    const CliRun scrub = RunCli("scrub" + Auth() + " --plain-progress");
    EXPECT_EQ(scrub.exit_code, 0) << scrub.output;
  }

  const Entry& entry_;
  const std::uint64_t seed_;
  const std::size_t liar_;
  std::mt19937_64 rng_;
  const OramParams params_ = testing::SmallParams(256, 4, 4);
  std::unique_ptr<testing::TestFs> fs_;
  Model model_;
  std::map<BlockId, std::vector<std::vector<std::uint8_t>>> uncertain_;
  std::map<std::uint64_t, std::vector<std::uint32_t>> occupied_;
  std::uint64_t next_eviction_ = 0;
  std::string old_copy_;
  std::string said_;  // every refusal and the CLI's output
};

void PrintTo(const Entry& e, std::ostream* os) { *os << e.name; }

class LyingServerSweep : public ::testing::TestWithParam<Entry> {};

TEST_P(LyingServerSweep, NoByteLostNoWrongByteNoLockoutTheLiarNamedAndRepaired) {
  const char* env = std::getenv("S3ORAM_SWEEP_ROUNDS");
  const int rounds = env && *env ? std::max(1, std::atoi(env)) : 1;
  const std::uint64_t base = testing::TestSeed();
  for (int r = 0; r < rounds; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    Story story(GetParam(), base + static_cast<std::uint64_t>(r));
    story.Run();
    if (::testing::Test::HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Structures, LyingServerSweep, ::testing::ValuesIn(kTable),
                         [](const ::testing::TestParamInfo<Entry>& param_info) {
                           return std::string(param_info.param.name);
                         });

}  // namespace
}  // namespace s3oram

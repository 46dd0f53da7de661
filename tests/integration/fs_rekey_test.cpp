// Issue 24, point 2: `s3oram rekey` rotates the master key. It is killed at
// every one of its fault points in turn (and inside an eviction of its
// purge), resumed each time by running the same command again (which, once
// the rotation has ended, refuses to start another and names backup-state
// for the last backup a kill cut off), mounted half-way, and afterwards:
//  * every file reads back, through a mount, byte for byte;
//  * no slot anywhere in any server's share file (live buckets and the free
//    places an eviction left) is tagged under the previous master key: each
//    is zero or tagged under the new one;
//  * the old passphrase opens neither the state nor any backup generation.
// The real CLI, daemon and servers throughout; the servers' share files are
// read from their data directories and every slot reconstructed.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "oramcore/base/private_file.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/crypto/share_mac_secrets.h"
#include "oramcore/math/shamir.h"
#include "oramcore/math/share_mac.h"
#include "oramcore/state/client_state.h"
#include "oramcore/state/state_file.h"
#include "serverd/share_store.h"
#include "tests/integration/fs_fixture.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::CliPath;
using testing::MountedFs;
using testing::PatternBytes;
using testing::RunCmd;
using testing::WriteFile;

namespace stdfs = std::filesystem;

std::string WritePassfile(const std::string& path, const std::string& pass) {
  std::filesystem::remove(path);
  EXPECT_TRUE(WritePrivateFile(
                  path, std::span(reinterpret_cast<const std::uint8_t*>(pass.data()), pass.size()))
                  .ok());
  return path;
}

testing::CmdResult RunCli(const std::vector<std::string>& argv,
                          const std::vector<std::string>& env = {}) {
  return RunCmd(argv, std::chrono::seconds(300), "", env);
}

// The master key `pass` unwraps from the state at `path`, or an empty Secret.
Secret MasterOf(const std::string& path, const std::string& pass) {
  auto u = UnlockedState::Unlock(path, Secret::CopyOf(pass));
  return u.ok() ? Secret::CopyOf((*u)->master().bytes()) : Secret();
}

// The share MAC secrets the state at `path` tags slots under now.
ShareMacSecrets MacSecretsOf(const std::string& path, const std::string& pass) {
  auto store = testing::OpenStateWithPassphrase(path, pass);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? (*store)->share_mac_secrets().Copy() : ShareMacSecrets{};
}

struct SlotCensus {
  std::uint64_t zero = 0;
  std::uint64_t current = 0;   // tagged under the key being checked for
  std::uint64_t previous = 0;  // tagged under the other one
  std::uint64_t neither = 0;
};

// Every slot of every bucket place (live or free) of the servers' share
// files, reconstructed from servers 0..t and classified by the share MAC key
// it verifies under. The servers hold the same map (same evictions).
SlotCensus CensusOfShares(const MountedFs& fs, const OramParams& p,
                          const ShareMacSecrets& current_secrets,
                          const ShareMacSecrets& previous_secrets) {
  SlotCensus out;
  const std::size_t d = static_cast<std::size_t>(p.data_elems_per_slot());
  const auto current = MakeShareMacKey(current_secrets, d);
  const auto previous = MakeShareMacKey(previous_secrets, d);
  const std::size_t parties = p.threshold + 1;
  std::vector<std::vector<serverd::StoreInspection::FileRange>> places(parties);
  std::vector<std::ifstream> files;
  std::vector<field::Elem> xs;
  for (std::size_t i = 0; i < parties; ++i) {
    const std::string shares =
        fs.test_fs()->cluster->dir() + "/data-" + std::to_string(i) + "/shares.bin";
    auto live = serverd::StoreInspection::InspectFile(shares, &places[i]);
    EXPECT_TRUE(live.ok()) << live.status().ToString();
    if (!live.ok()) return out;
    files.emplace_back(shares, std::ios::binary);
    xs.push_back(shamir::PartyX(i));
  }
  for (std::size_t i = 1; i < parties; ++i) {
    EXPECT_EQ(places[i].size(), places[0].size());
    if (places[i].size() != places[0].size()) return out;
  }
  auto lambda = shamir::LagrangeAtZero(xs);
  EXPECT_TRUE(lambda.ok());
  const std::size_t m = static_cast<std::size_t>(p.elems_per_slot());
  std::vector<std::vector<field::Elem>> shares(parties, std::vector<field::Elem>(m));
  std::vector<const field::Elem*> ptrs;
  for (auto& s : shares) ptrs.push_back(s.data());
  std::vector<field::Elem> slot(m);
  for (std::size_t q = 0; q < places[0].size(); ++q) {
    for (std::uint32_t z = 0; z < p.bucket_size; ++z) {
      for (std::size_t i = 0; i < parties; ++i) {
        files[i].seekg(static_cast<std::streamoff>(places[i][q].data + z * p.slot_bytes()));
        files[i].read(reinterpret_cast<char*>(shares[i].data()),
                      static_cast<std::streamsize>(m * sizeof(field::Elem)));
        EXPECT_TRUE(files[i].good()) << "server " << i << " place " << q << " slot " << z;
      }
      shamir::Recover(ptrs, *lambda, m, slot.data());
      bool zero = true;
      for (field::Elem e : slot) zero = zero && e == 0;
      if (zero) {
        ++out.zero;
      } else if (current->Verify(slot)) {
        ++out.current;
      } else if (previous->Verify(slot)) {
        ++out.previous;
      } else {
        ++out.neither;
      }
    }
  }
  return out;
}

std::string Describe(const SlotCensus& c) {
  return std::to_string(c.zero) + " zero, " + std::to_string(c.current) + " under the new key, " +
         std::to_string(c.previous) + " under the previous key, " + std::to_string(c.neither) +
         " under neither";
}

std::vector<std::string> RekeyArgs(const std::string& state, const std::string& from,
                                   const std::string& to) {
  return {
      CliPath(),        "rekey",           "-s", state, "--passfile", from, "--new-passfile", to,
      "--insecure-kdf", "--plain-progress"};
}

// Runs the rekey with S3ORAM_FAULT=`fault` and expects it killed there.
void RunKilledAt(const std::vector<std::string>& argv, const std::string& fault) {
  SCOPED_TRACE(fault);
  auto r = RunCli(argv, {"S3ORAM_FAULT=" + fault});
  ASSERT_TRUE(WIFSIGNALED(r.wait_status)) << "not killed at " << fault << ":\n" << r.output;
}

struct Files {
  std::vector<std::pair<std::string, std::string>> entries;
  void ExpectIn(const MountedFs& fs) const {
    for (const auto& [name, content] : entries) {
      EXPECT_TRUE(testing::FileHasContent(fs.Path(name), content)) << name;
    }
  }
};

TEST(FsRekeyTest, KilledAnywhereItResumesAndLeavesNothingUnderTheOldKey) {
  testing::FsOptions options;
  options.params = testing::TinyFsParams();
  auto fs = MountedFs::Create(options);
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  const std::uint64_t seed = s3oram::testing::TestSeed();
  std::printf("[ seed     ] %llu (file contents)\n", static_cast<unsigned long long>(seed));
  const OramParams& p = options.params;
  const std::string state = fs->state();

  // Files, one rewritten (stale copies of its old blocks stay in the tree).
  Files files;
  files.entries = {{"big", PatternBytes(90000, seed)},
                   {"small", PatternBytes(3000, seed + 1)},
                   {"rewritten", PatternBytes(30000, seed + 2)}};
  for (const auto& [name, content] : files.entries) ASSERT_TRUE(WriteFile(fs->Path(name), content));
  ASSERT_TRUE(WriteFile(fs->Path("rewritten"), PatternBytes(30000, seed + 3)));
  files.entries[2].second = PatternBytes(30000, seed + 3);
  ASSERT_TRUE(fs->Unmount());

  const std::string first = testing::ReadWholeFile(fs->passfile());
  const std::string second = "the second passphrase";
  const std::string third = "the third passphrase";
  const std::string first_file = WritePassfile(fs->Scratch("first-pass"), first);
  const std::string second_file = WritePassfile(fs->Scratch("second-pass"), second);
  const std::string third_file = WritePassfile(fs->Scratch("third-pass"), third);
  const Secret first_master = MasterOf(state, first);
  ASSERT_FALSE(first_master.empty());
  const ShareMacSecrets first_mac = MacSecretsOf(state, first);
  const ShareMacSecrets no_key =
      DeriveShareMacSecrets(Secret::CopyOf(std::string(kMasterKeyBytes, '\x5a')));
  {
    const SlotCensus before = CensusOfShares(*fs, p, first_mac, no_key);
    std::printf("[ census   ] before: %s\n", Describe(before).c_str());
    EXPECT_GT(before.current, 0u) << "the census sees no tagged slot at all";
    EXPECT_EQ(before.neither, 0u);
  }

  // 1. The first rotation, killed at each point in order, resumed each time.
  const auto to_second = RekeyArgs(state, first_file, second_file);
  for (const char* fault : {"rekey.switch.copied", "rekey.switch.before_rename"}) {
    RunKilledAt(to_second, fault);
    EXPECT_FALSE(MasterOf(state, first).empty()) << "killed at " << fault << " before the switch";
  }
  RunKilledAt(to_second, "rekey.switch.after_rename");
  EXPECT_TRUE(MasterOf(state, first).empty());
  ASSERT_FALSE(MasterOf(state, second).empty());
  EXPECT_FALSE(stdfs::exists(state + ".rekeying"));
  RunKilledAt(to_second, "rekey.reseal.after_chunk@2");
  auto mid = RunCli({CliPath(), "status", "-s", state, "--passfile", second_file});
  EXPECT_NE(mid.output.find("rekey       UNDER WAY (re-sealing"), std::string::npos) << mid.output;
  // Mounted half-way: blocks under either key read back.
  WritePassfile(fs->passfile(), second);
  ASSERT_TRUE(fs->Mount());
  files.ExpectIn(*fs);
  ASSERT_TRUE(fs->Unmount());
  RunKilledAt(to_second, "rekey.purge.recorded");
  RunKilledAt(to_second, "client.evict.after_intent@3");
  RunKilledAt(to_second, "rekey.finalize.before_commit");
  RunKilledAt(to_second, "rekey.finalize.after_commit");
  // Run again: the rotation had ended, so there is nothing to resume and
  // no new rotation starts; the missing last backup is made up by hand.
  const Secret second_master = MasterOf(state, second);
  ASSERT_FALSE(second_master.empty());
  const ShareMacSecrets second_mac = MacSecretsOf(state, second);
  // One half of the share MAC replaced, the other shared with the key before.
  EXPECT_EQ(SharedHalf(first_mac, second_mac), std::optional<std::size_t>(0));
  auto last = RunCli(to_second);
  EXPECT_EQ(last.exit_code, 2) << last.output;
  EXPECT_NE(last.output.find("no rekey is under way"), std::string::npos) << last.output;
  EXPECT_NE(last.output.find("backup-state"), std::string::npos) << last.output;
  EXPECT_TRUE(MasterOf(state, second).Equals(second_master)) << "a rerun rotated again";
  auto made_up = RunCli({CliPath(), "backup-state", "-s", state, "--passfile", second_file});
  ASSERT_EQ(made_up.exit_code, 0) << made_up.output;
  {
    const SlotCensus after = CensusOfShares(*fs, p, second_mac, first_mac);
    std::printf("[ census   ] after the first rekey: %s\n", Describe(after).c_str());
    EXPECT_EQ(after.previous, 0u) << Describe(after);
    EXPECT_EQ(after.neither, 0u) << Describe(after);
    EXPECT_GT(after.current, 0u) << Describe(after);
  }
  // The old passphrase opens no state and no backup generation.
  auto st = RunCli({CliPath(), "status", "-s", state, "--passfile", first_file});
  EXPECT_EQ(st.exit_code, 1) << st.output;
  EXPECT_NE(st.output.find("wrong passphrase"), std::string::npos) << st.output;
  EXPECT_EQ(st.output.find("UNDER WAY"), std::string::npos) << st.output;
  const std::string restored = fs->Scratch("restored.s3oram");
  for (std::uint64_t g = 0; g <= 8; ++g) {
    std::vector<std::string> argv = {CliPath(), "restore",    "-s",
                                     restored,  "--passfile", first_file};
    const auto& c = *fs->test_fs()->cluster;
    for (std::size_t i = 0; i < c.endpoints().size(); ++i) {
      argv.insert(argv.end(),
                  {"--server", c.endpoints()[i], "--server-key", c.server_public_key_file(i)});
    }
    argv.insert(argv.end(), {"--client-key", c.client_key_file()});
    if (g != 0) argv.insert(argv.end(), {"--generation", std::to_string(g)});
    auto r = RunCli(argv);
    EXPECT_EQ(r.exit_code, 1) << "generation " << g << ": " << r.output;
    EXPECT_FALSE(stdfs::exists(restored)) << "generation " << g;
  }
  ASSERT_TRUE(fs->Mount());
  files.ExpectIn(*fs);
  ASSERT_TRUE(fs->Unmount());

  // 2. A second rotation killed at the points a resumed run never reaches:
  // right after the switch, and before the last backup.
  const auto to_third = RekeyArgs(state, second_file, third_file);
  RunKilledAt(to_third, "rekey.before_first_upload");
  RunKilledAt(to_third, "rekey.before_final_upload");
  auto again = RunCli(to_third);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  auto made_up_again = RunCli({CliPath(), "backup-state", "-s", state, "--passfile", third_file});
  ASSERT_EQ(made_up_again.exit_code, 0) << made_up_again.output;
  const Secret third_master = MasterOf(state, third);
  ASSERT_FALSE(third_master.empty());
  const ShareMacSecrets third_mac = MacSecretsOf(state, third);
  // The other half this time: nothing of the first key's share MAC is left.
  EXPECT_EQ(SharedHalf(second_mac, third_mac), std::optional<std::size_t>(1));
  EXPECT_EQ(SharedHalf(first_mac, third_mac), std::nullopt);
  {
    const SlotCensus after = CensusOfShares(*fs, p, third_mac, second_mac);
    std::printf("[ census   ] after the second rekey: %s\n", Describe(after).c_str());
    EXPECT_EQ(after.previous, 0u) << Describe(after);
    EXPECT_EQ(after.neither, 0u) << Describe(after);
    const SlotCensus first_key = CensusOfShares(*fs, p, first_mac, first_mac);
    EXPECT_EQ(first_key.current, 0u) << "slots under the first key: " << Describe(first_key);
  }
  WritePassfile(fs->passfile(), third);
  ASSERT_TRUE(fs->Mount());
  files.ExpectIn(*fs);
  ASSERT_TRUE(fs->Unmount());
}

// A whole rotation in one run: its cost is stated first, then it reports
// what it did. A second device attached before it (same passphrase) is
// stale afterwards: its state still holds the previous key, which opens
// nothing on the servers any more; `refresh-state` brings it the new one.
TEST(FsRekeyTest, OneRunStatesItsCostAndRekeysEverythingAndASecondDeviceRefreshes) {
  testing::FsOptions options;
  options.params = testing::TinyFsParams();
  auto fs = MountedFs::Create(options);
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  const std::string content = PatternBytes(40000, s3oram::testing::TestSeed());
  ASSERT_TRUE(WriteFile(fs->Path("f"), content));
  ASSERT_TRUE(fs->Unmount());
  const std::string state = fs->state();
  const std::string pass = testing::ReadWholeFile(fs->passfile());
  const Secret old_master = MasterOf(state, pass);
  const ShareMacSecrets old_mac = MacSecretsOf(state, pass);

  // The second device (this machine's client key, another state file).
  const std::string state_b = fs->Scratch("device-b.s3oram");
  {
    std::vector<std::string> argv = {CliPath(),    "attach",       "-s",           state_b,
                                     "--passfile", fs->passfile(), "--mountpoint", fs->root()};
    const auto& c = *fs->test_fs()->cluster;
    for (std::size_t i = 0; i < c.endpoints().size(); ++i) {
      argv.insert(argv.end(),
                  {"--server", c.endpoints()[i], "--server-key", c.server_public_key_file(i)});
    }
    argv.insert(argv.end(), {"--client-key", c.client_key_file()});
    auto at = RunCli(argv);
    ASSERT_EQ(at.exit_code, 0) << at.output;
  }
  EXPECT_TRUE(MasterOf(state_b, pass).Equals(old_master));

  // The same passphrase: the key changes all the same.
  auto r = RunCli(RekeyArgs(state, fs->passfile(), fs->passfile()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ORAM accesses ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rekey done: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("backup generation"), std::string::npos) << r.output;
  const Secret new_master = MasterOf(state, pass);
  ASSERT_FALSE(new_master.empty());
  EXPECT_FALSE(new_master.Equals(old_master));
  const ShareMacSecrets new_mac = MacSecretsOf(state, pass);
  const SlotCensus after = CensusOfShares(*fs, options.params, new_mac, old_mac);
  std::printf("[ census   ] %s\n", Describe(after).c_str());
  EXPECT_EQ(after.previous, 0u) << Describe(after);
  ASSERT_TRUE(fs->Mount());
  EXPECT_TRUE(testing::FileHasContent(fs->Path("f"), content));
  ASSERT_TRUE(fs->Unmount());

  // Device B: refused as stale, then refreshed onto the new key.
  fs->test_fs()->state = state_b;
  auto stale = fs->Mount();
  ASSERT_FALSE(stale);
  EXPECT_NE(std::string(stale.message()).find("stale state"), std::string::npos) << stale.message();
  auto refreshed =
      RunCli({CliPath(), "refresh-state", "-s", state_b, "--passfile", fs->passfile()});
  ASSERT_EQ(refreshed.exit_code, 0) << refreshed.output;
  EXPECT_TRUE(MasterOf(state_b, pass).Equals(new_master));
  // The share MAC secrets travel in the backup with the rest of the state.
  EXPECT_TRUE(MacSecretsOf(state_b, pass).Equals(new_mac));
  ASSERT_TRUE(fs->Mount());
  EXPECT_TRUE(testing::FileHasContent(fs->Path("f"), content));
}

}  // namespace
}  // namespace s3oram

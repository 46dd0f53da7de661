// A lost laptop reveals nothing (issue 16): after a mounted filesystem has
// been given distinctive names, xattrs, symlink targets and contents and
// unmounted, no byte of the state file or of anything beside it holds any of
// them; the state's bytes after its header look uniformly random; the
// sqlite3 tool cannot open it; and a wrong passphrase, a flipped byte
// anywhere, a truncated state and another filesystem's state are each
// refused with a clear error before anything reaches the servers.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fused/metadata_store.h"
#include "oramcore/protocol/client.h"
#include "oramcore/state/sealed_vfs.h"
#include "tests/integration/fs_fixture.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

namespace stdfs = std::filesystem;
using testing::FsOptions;
using testing::MountedFs;

// Printable runs of 4 or more bytes, as strings(1) finds them.
std::vector<std::string> Strings(const std::string& bytes) {
  std::vector<std::string> out;
  std::string run;
  for (char c : bytes) {
    if (c >= 0x20 && c < 0x7f) {
      run += c;
    } else {
      if (run.size() >= 4) out.push_back(run);
      run.clear();
    }
  }
  if (run.size() >= 4) out.push_back(run);
  return out;
}

// Every file beside the state that belongs to it (the state, its -wal and
// -shm, anything else named after it).
std::vector<std::string> StateFiles(const std::string& state) {
  std::vector<std::string> out;
  const stdfs::path p(state);
  for (const auto& e : stdfs::directory_iterator(p.parent_path())) {
    if (e.path().filename().string().rfind(p.filename().string(), 0) == 0) {
      out.push_back(e.path().string());
    }
  }
  return out;
}

TEST(FsStateAtRestTest, NoNameXattrLinkTargetOrContentInAnyByteOfTheState) {
  if (!testing::ReferenceDir().empty()) GTEST_SKIP() << "needs the s3oramfs daemon";
  auto fs = MountedFs::Create(FsOptions{});
  ASSERT_TRUE(fs);
  const std::vector<std::string> secrets = {
      "tax-return-2026.pdf",       "diagnosis-oncology",         "user.secret-xattr-name",
      "xattr-value-swiss-account", "/target/of/the/secret-link", "plaintext-marker-7f3a9c"};
  ASSERT_EQ(::mkdir(fs->Path("diagnosis-oncology").c_str(), 0755), 0);
  ASSERT_TRUE(testing::WriteFile(fs->Path("diagnosis-oncology/tax-return-2026.pdf"),
                                 std::string(3000, 'x') + "plaintext-marker-7f3a9c"));
  ASSERT_EQ(::setxattr(fs->Path("diagnosis-oncology/tax-return-2026.pdf").c_str(),
                       "user.secret-xattr-name", "xattr-value-swiss-account", 25, 0),
            0);
  ASSERT_EQ(::symlink("/target/of/the/secret-link", fs->Path("link").c_str()), 0);
  for (int i = 0; i < 100; ++i) {  // enough metadata to span many pages
    ASSERT_TRUE(testing::WriteFile(fs->Path("note-" + std::to_string(i) + ".txt"), "n"));
  }
  ASSERT_TRUE(fs->Unmount());

  const std::vector<std::string> files = StateFiles(fs->state());
  ASSERT_FALSE(files.empty());
  for (const std::string& file : files) {
    const std::string bytes = testing::ReadWholeFile(file);
    for (const std::string& s : secrets) {
      EXPECT_EQ(bytes.find(s), std::string::npos) << s << " is in " << file;
    }
    for (const std::string& run : Strings(bytes)) {
      for (const std::string& s : secrets) {
        EXPECT_EQ(run.find(s.substr(0, 8)), std::string::npos)
            << "strings(1) of " << file << " shows " << run;
      }
    }
  }

  // Uniform after the header: chi-square over byte values, 255 degrees of
  // freedom (400 is exceeded by chance with probability < 1e-8).
  const std::string state = testing::ReadWholeFile(fs->state());
  ASSERT_GT(state.size(), kSealedHeaderBytes + 4 * kSealedPageBytes);
  const std::string body = state.substr(kSealedHeaderBytes);
  std::vector<double> counts(256, 0);
  for (unsigned char b : body) counts[b] += 1;
  const double expected = static_cast<double>(body.size()) / 256;
  double chi2 = 0;
  for (double c : counts) chi2 += (c - expected) * (c - expected) / expected;
  std::printf("chi-square %.1f over %zu bytes after the header\n", chi2, body.size());
  EXPECT_LT(chi2, 400.0);

  // The sqlite3 tool cannot read it.
  testing::CmdResult tool = testing::RunCmd({"sqlite3", fs->state(), "select * from fs_dirents"});
  EXPECT_NE(tool.exit_code, 0) << tool.output;
  EXPECT_EQ(tool.output.find("tax-return"), std::string::npos) << tool.output;

  // And with the passphrase everything is still there.
  ASSERT_TRUE(fs->Mount());
  EXPECT_EQ(testing::ReadWholeFile(fs->Path("diagnosis-oncology/tax-return-2026.pdf")),
            std::string(3000, 'x') + "plaintext-marker-7f3a9c");
  char target[64] = {};
  EXPECT_EQ(::readlink(fs->Path("link").c_str(), target, sizeof target - 1), 26);
  EXPECT_STREQ(target, "/target/of/the/secret-link");
}

// Each bad state is refused by the client before any request: the servers'
// epoch, applied seq and evictions are exactly as before.
TEST(FsStateAtRestTest, DamagedWrongOrForeignStatesAreRefusedAndTheServersUntouched) {
  if (!testing::ReferenceDir().empty()) GTEST_SKIP() << "needs the s3oramfs daemon";
  auto fs = MountedFs::Create(FsOptions{});
  ASSERT_TRUE(fs);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(testing::WriteFile(fs->Path("f" + std::to_string(i)), std::string(100, 'a' + i)));
  }
  ASSERT_TRUE(fs->Unmount());
  // Another filesystem's state, pointed at these servers (its own are gone).
  const std::string foreign = fs->Scratch("foreign.s3oram");
  {
    auto other = MountedFs::Create(FsOptions{});
    ASSERT_TRUE(other);
    ASSERT_TRUE(other->Unmount());
    ASSERT_TRUE(testing::WriteFile(foreign, testing::ReadWholeFile(other->state())));
  }
  {
    auto mine = testing::TestOpenStore(fs->state());
    ASSERT_TRUE(mine.ok()) << mine.status().ToString();
    auto theirs = testing::TestOpenStore(foreign);
    ASSERT_TRUE(theirs.ok()) << theirs.status().ToString();
    const FsConfig& c = (*mine)->config();
    ASSERT_TRUE((*theirs)->ReplaceMachineConfig(c.servers, c.server_keys, c.client_key_file).ok());
  }

  auto servers_now = [&]() {
    std::string out;
    auto c = OramClient::OpenReadOnly(fs->state(), testing::TestPassphrase());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return out;
    for (const auto& r : (*c)->QueryServers(std::chrono::milliseconds(5000))) {
      out += std::to_string(r.reply.epoch) + "/" + std::to_string(r.reply.applied_seq) + "/" +
             std::to_string(r.reply.applied_evictions) + " ";
    }
    return out;
  };
  const std::string before = servers_now();
  const std::string good = testing::ReadWholeFile(fs->state());
  auto restore = [&]() {
    ASSERT_TRUE(testing::WriteFile(fs->state(), good));
    for (const char* s : {"-wal", "-shm"}) ::unlink((fs->state() + s).c_str());
  };
  auto refused = [&](const std::string& what, const Secret& pass,
                     const std::vector<std::string>& needles) {
    auto c = OramClient::Open(fs->state(), pass, testing::FastRetryOptions());
    ASSERT_FALSE(c.ok()) << what << " was accepted";
    for (const std::string& n : needles) {
      EXPECT_NE(c.status().message().find(n), std::string::npos)
          << what << ": " << c.status().ToString();
    }
  };

  refused("a wrong passphrase", Secret::CopyOf(std::string_view("not the passphrase")),
          {"passphrase"});

  // The pages SQLite uses (dbstat): a page on its free list (a record that
  // was deleted, such as an eviction's plan once it committed) is never read
  // as data again before it is rewritten, so a flip there changes nothing.
  std::set<std::size_t> used_pages;
  {
    auto c = OramClient::OpenReadOnly(fs->state(), testing::TestPassphrase(),
                                      testing::FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto db = (*c)->unlocked_state()->OpenDatabase();
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(*db, "SELECT DISTINCT pageno FROM dbstat", -1, &st, nullptr) ==
        SQLITE_OK) {
      while (sqlite3_step(st) == SQLITE_ROW) {
        used_pages.insert(static_cast<std::size_t>(sqlite3_column_int64(st, 0)));
      }
    }
    sqlite3_finalize(st);
    sqlite3_close_v2(*db);
  }
  std::mt19937_64 rng = testing::SeededRng();
  const std::size_t pages = (good.size() - kSealedHeaderBytes) / kSealedPageBytes;
  for (std::size_t trial = 0; trial < pages + 6; ++trial) {
    // One byte in every page, and six in the header.
    const std::size_t at =
        trial < pages ? kSealedHeaderBytes + trial * kSealedPageBytes + rng() % kSealedPageBytes
                      : rng() % kSealedHeaderBytes;
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ (1 + rng() % 255));
    ASSERT_TRUE(testing::WriteFile(fs->state(), bad));
    // A flip in a page no read at open touches (free space, a table not
    // loaded) is found when that page is read: open as the daemon does
    // (read-only here: the servers must not change), then the metadata.
    auto c = OramClient::OpenReadOnly(fs->state(), testing::TestPassphrase(),
                                      testing::FastRetryOptions());
    bool caught = !c.ok();
    std::string why = c.ok() ? "" : c.status().ToString();
    if (c.ok()) {
      auto meta = fs::MetadataStore::Open((*c)->unlocked_state(), fs->params().capacity_blocks,
                                          static_cast<std::uint32_t>(fs->params().block_bytes));
      if (!meta.ok()) {
        caught = true;
        why = meta.status().ToString();
      } else if (Status inv = (*meta)->CheckInvariants(); !inv.ok()) {
        caught = true;
        why = inv.ToString();
      } else {
        // Only pages no query reads are left (SQLite's free list):
        // integrity_check reads every page.
        meta->reset();
        auto db = (*c)->unlocked_state()->OpenDatabase();
        ASSERT_TRUE(db.ok()) << db.status().ToString();
        sqlite3_stmt* st = nullptr;
        sqlite3_prepare_v2(*db, "PRAGMA integrity_check", -1, &st, nullptr);
        caught = sqlite3_step(st) != SQLITE_ROW ||
                 std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))) != "ok";
        sqlite3_finalize(st);
        sqlite3_close_v2(*db);
        why = "integrity_check";
      }
    }
    const bool free_page = trial < pages && !used_pages.empty() && !used_pages.count(trial + 1);
    EXPECT_TRUE(caught || free_page) << "a flipped byte at " << at << " went unnoticed";
    if (at >= kSealedHeaderBytes && why != "integrity_check") {
      EXPECT_NE(why.find("authentication"), std::string::npos) << at << ": " << why;
    }
    c = Status::Unavailable("closed before the file is restored");  // its connections too
    restore();
  }

  ASSERT_TRUE(testing::WriteFile(fs->state(), good.substr(0, good.size() - kSealedPageBytes - 7)));
  refused("a truncated state", testing::TestPassphrase(), {"truncated"});
  restore();

  // The other filesystem's state unlocks (same test passphrase), and these
  // servers refuse its filesystem id.
  {
    auto c = OramClient::Open(foreign, testing::TestPassphrase(), testing::FastRetryOptions());
    EXPECT_FALSE(c.ok()) << "another filesystem's state was accepted";
  }

  EXPECT_EQ(servers_now(), before) << "a refused state changed something on the servers";
  ASSERT_TRUE(fs->Mount());
  EXPECT_EQ(testing::ReadWholeFile(fs->Path("f7")), std::string(100, 'a' + 7));
}

}  // namespace
}  // namespace s3oram

// No secret in any log (issue 4): a full run at debug level everywhere —
// three servers, s3oram init (CLI) and passwd, the FUSE daemon writing,
// fsyncing, reading and remounting a file — and then every byte the run left
// on disk (server logs and share files, the daemon's log and output, the
// state file, CLI output) is searched for the passphrases, the master key
// (raw, hex and base64), and a plaintext marker written into a file. Only
// the passphrase files themselves may hold a passphrase.
#include <gtest/gtest.h>
#include <sodium.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "oramcore/base/random.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/state/client_state.h"
#include "tests/integration/fs_fixture.h"

namespace s3oram {
namespace {

using testing::CmdResult;
using testing::FsOptions;
using testing::MountedFs;
using testing::RunCmd;

std::string Hex(std::span<const std::uint8_t> b) {
  std::string out(b.size() * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), b.data(), b.size());
  out.pop_back();
  return out;
}

std::string Base64(std::span<const std::uint8_t> b) {
  std::string out(sodium_base64_ENCODED_LEN(b.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), b.data(), b.size(), sodium_base64_VARIANT_ORIGINAL);
  out.pop_back();
  return out;
}

TEST(FsSecretsTest, NoSecretInAnyLogAtDebugLevel) {
  if (!testing::ReferenceDir().empty()) GTEST_SKIP() << "needs the s3oramfs daemon";
  ::setenv("S3ORAM_TEST_SERVER_LOG", "debug", 1);  // this test process only
  FsOptions o;
  o.mount_opts = "log_level=debug";
  auto fs = MountedFs::Create(o);
  ASSERT_TRUE(fs);

  // The master key, as the test can compute it (it knows the passphrase).
  std::vector<std::uint8_t> master;
  {
    auto unlocked = testing::TestUnlock(fs->state());
    ASSERT_TRUE(unlocked.ok()) << unlocked.status().ToString();
    const Secret& key = (*unlocked)->master();
    master.assign(key.bytes().begin(), key.bytes().end());
  }
  std::array<std::uint8_t, 12> tag;
  random::Bytes(tag);
  const std::string marker = "PLAINTEXT-MARKER-" + Hex(tag);
  std::string content;
  while (content.size() < 12 * 4096) content += marker + " ";

  // Many small writes and reads: plenty of debug lines to search.
  {
    int fd = ::open(fs->Path("secret.txt").c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    for (std::size_t off = 0; off < content.size(); off += 1000) {
      ASSERT_TRUE(testing::PwriteAll(
          fd, std::string_view(content).substr(off, 1000), static_cast<off_t>(off)));
      if (off % 8000 == 0) {
        EXPECT_EQ(::fsync(fd), 0);
      }
    }
    ::close(fd);
  }
  {
    int fd = ::open(fs->Path("secret.txt").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
  EXPECT_TRUE(testing::FileHasContent(fs->Path("secret.txt"), content));
  ASSERT_TRUE(fs->Remount());
  EXPECT_TRUE(testing::FileHasContent(fs->Path("secret.txt"), content));
  ASSERT_TRUE(fs->Unmount());

  const std::string new_pass = "the new passphrase " + Hex(tag);
  const std::string new_passfile = fs->Scratch("new-pass");
  ASSERT_TRUE(WritePrivateFile(new_passfile,
                               std::span(reinterpret_cast<const std::uint8_t*>(new_pass.data()),
                                         new_pass.size()))
                  .ok());
  CmdResult pw = RunCmd({S3ORAM_TEST_CLI, "passwd", "--state", fs->state(), "--passfile",
                         fs->passfile(), "--new-passfile", new_passfile, "--insecure-kdf"});
  ASSERT_EQ(pw.exit_code, 0) << pw.output;
  CmdResult status = RunCmd({S3ORAM_TEST_CLI, "status", "--state", fs->state()});
  ASSERT_EQ(status.exit_code, 0) << status.output;

  struct Needle {
    std::string what, bytes;
  };
  const std::string raw_key(master.begin(), master.end());
  const std::vector<Needle> needles = {
      {"the passphrase", testing::kTestPassphrase},
      {"the new passphrase", new_pass},
      {"the master key (raw)", raw_key},
      {"the master key (hex)", Hex(master)},
      {"the master key (base64)", Base64(master)},
      {"the plaintext marker", marker},
  };
  const std::vector<std::pair<std::string, std::string>> outputs = {
      {"s3oram passwd output", pw.output}, {"s3oram status output", status.output}};
  auto search = [&](const std::string& where, const std::string& text) {
    for (const Needle& n : needles) {
      EXPECT_EQ(text.find(n.bytes), std::string::npos) << n.what << " found in " << where;
    }
  };
  for (const auto& [where, text] : outputs) search(where, text);
  // The search itself works: the passphrase files do hold their passphrases.
  ASSERT_NE(testing::ReadWholeFile(fs->passfile()).find(testing::kTestPassphrase),
            std::string::npos);
  ASSERT_NE(testing::ReadWholeFile(new_passfile).find(new_pass), std::string::npos);

  // Every file the run left, the passphrase files excepted (and the mount
  // point, now an empty directory, is not descended into while mounted).
  namespace stdfs = std::filesystem;
  const std::string base = stdfs::path(fs->Scratch("x")).parent_path().string();
  std::size_t files = 0, log_bytes = 0, debug_lines = 0;
  for (const auto& entry : stdfs::recursive_directory_iterator(base)) {
    if (!entry.is_regular_file()) continue;
    const std::string path = entry.path().string();
    if (path == fs->passfile() || path == new_passfile) continue;
    const std::string text = testing::ReadWholeFile(path);
    if (path.ends_with(".log") || path.ends_with(".txt")) {
      log_bytes += text.size();
      for (std::size_t at = text.find(" debug: "); at != std::string::npos;
           at = text.find(" debug: ", at + 1)) {
        ++debug_lines;
      }
    }
    search(path, text);
    ++files;
  }
  std::printf("[ secrets  ] searched %zu files (%zu bytes of logs, %zu debug lines) for %zu "
              "secrets\n",
              files, log_bytes, debug_lines, needles.size());
  EXPECT_GT(debug_lines, 100u) << "debug logging produced almost nothing: the test proves little";
}

}  // namespace
}  // namespace s3oram

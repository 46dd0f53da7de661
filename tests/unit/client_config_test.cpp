// The FUSE client's config file (fused/client_config.h, man 5 s3oramfs.toml):
// the documented schema, strict validation with messages that name the file,
// line, column and key, and file loading.
#include "fused/client_config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace s3oram::fs {
namespace {

// The format as documented (line numbers matter to the tests below: the
// [mount] header is line 1).
constexpr const char* kExample =
    "[mount]\n"
    "state = \"/home/alice/vault.s3oram\"     # required: the client state file\n"
    "mountpoint = \"/home/alice/vault\"       # required\n"
    "passfile = \"/home/alice/.config/s3oramfs/vault.pass\"  # optional, mode 0600\n"
    "cache_size = 64                        # MiB\n"
    "timeout = 30                           # seconds\n"
    "evict_timeout = 300                    # seconds\n"
    "log_level = \"info\"                     # trace, debug, info, warn, error\n"
    "log_file = \"/home/alice/.cache/s3oramfs/vault.log\"   # optional\n"
    "force = false                          # take the lease over\n"
    "fuse_options = [\"allow_other\"]         # extra libfuse -o options\n";

constexpr const char* kMinimal =
    "[mount]\n"
    "state = \"/s\"\n"
    "mountpoint = \"/m\"\n";

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "in: " << (haystack)

// Parses `text` expecting an InvalidArgument; returns the message.
std::string ErrorOf(const std::string& text) {
  auto r = ParseClientConfig(text, "vault.toml");
  EXPECT_FALSE(r.ok()) << "accepted:\n" << text;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << r.status().ToString();
  return r.status().message();
}

// kExample with the line that starts with `key =` replaced by `with`
// (removed if `with` is empty).
std::string WithLine(const std::string& key, const std::string& with) {
  std::string text = kExample;
  const auto pos = text.find("\n" + key + " =");
  EXPECT_NE(pos, std::string::npos) << key;
  const auto end = text.find('\n', pos + 1);
  text.replace(pos + 1, end - pos - 1, with);
  if (with.empty()) text.erase(pos + 1, 1);
  return text;
}

TEST(ClientConfig, DocumentedExampleRoundTripsIntoTheStruct) {
  auto r = ParseClientConfig(kExample, "vault.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ClientConfig want;
  want.state = "/home/alice/vault.s3oram";
  want.mountpoint = "/home/alice/vault";
  want.passfile = "/home/alice/.config/s3oramfs/vault.pass";
  want.cache_mib = 64;
  want.timeout_seconds = 30;
  want.evict_timeout_seconds = 300;
  want.log_level = "info";
  want.log_file = "/home/alice/.cache/s3oramfs/vault.log";
  want.force = false;
  want.fuse_options = {"allow_other"};
  EXPECT_EQ(*r, want);
}

TEST(ClientConfig, OptionalKeysStayUnsetSoTheDaemonDefaultsApply) {
  auto r = ParseClientConfig(kMinimal, "vault.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ClientConfig want;
  want.state = "/s";
  want.mountpoint = "/m";
  EXPECT_EQ(*r, want);
  EXPECT_FALSE(r->cache_mib.has_value());
  EXPECT_FALSE(r->log_level.has_value());

  auto full = ParseClientConfig(
      std::string(kMinimal) +
          "cache_size = 1048576\nreadahead = 16\npipeline = 1\nconstant_rate = 5\n"
          "timeout = 86400\nevict_timeout = 1\n"
          "log_level = \"trace\"\nforce = true\nrefresh_state = true\n"
          "fuse_options = [\"allow_other\", \"max_read=131072\", "
          "\"fsname_like=a,b\"]\n",
      "vault.toml");
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->cache_mib, 1048576u);
  EXPECT_EQ(full->readahead_blocks, 16u);
  EXPECT_EQ(full->pipeline_accesses, 1u);
  EXPECT_EQ(full->constant_rate_ms, 5u);
  EXPECT_EQ(full->timeout_seconds, 86400u);
  EXPECT_EQ(full->evict_timeout_seconds, 1u);
  EXPECT_EQ(full->log_level, "trace");
  EXPECT_TRUE(full->force);
  EXPECT_TRUE(full->refresh_state);
  EXPECT_EQ(full->fuse_options,
            (std::vector<std::string>{"allow_other", "max_read=131072", "fsname_like=a,b"}));
  // Inline tables are TOML too.
  auto inl = ParseClientConfig("mount = { state = \"/s\", mountpoint = \"/m\" }\n", "vault.toml");
  ASSERT_TRUE(inl.ok()) << inl.status().ToString();
  EXPECT_EQ(inl->mountpoint, "/m");
}

TEST(ClientConfig, UnknownKeysAndTablesNameFileLineAndKey) {
  EXPECT_EQ(ErrorOf(WithLine("cache_size", "cahce_size = 64")),
            "vault.toml:5:1: mount.cahce_size: unknown key (allowed: state, mountpoint, passfile, "
            "cache_size, writeback_delay, readahead, pipeline, constant_rate, timeout, "
            "evict_timeout, log_level, log_file, force, refresh_state, fuse_options)");
  std::string m = ErrorOf(std::string(kExample) + "\n[server]\nindex = 0\n");
  EXPECT_EQ(m.rfind("vault.toml:13:", 0), 0u) << m;
  EXPECT_CONTAINS(m, ": server: unknown key (allowed: mount)");
  m = ErrorOf(std::string(kExample) + "[mount.extra]\nx = 1\n");
  EXPECT_EQ(m.rfind("vault.toml:12:", 0), 0u) << m;
  EXPECT_CONTAINS(m, ": mount.extra: unknown key");
  m = ErrorOf("top = 1\n" + std::string(kMinimal));
  EXPECT_EQ(m.rfind("vault.toml:1:1: top: unknown key (allowed: mount)", 0), 0u) << m;
}

TEST(ClientConfig, WrongTypesNameFileLineAndKey) {
  EXPECT_EQ(ErrorOf(WithLine("cache_size", "cache_size = \"64\"")),
            "vault.toml:5:14: mount.cache_size: expected an integer in 1..1048576, got a string");
  EXPECT_EQ(ErrorOf(WithLine("cache_size", "readahead = 17")),
            "vault.toml:5:13: mount.readahead: expected an integer in 0..16, got 17");
  EXPECT_EQ(ErrorOf(WithLine("timeout", "timeout = 1.5")),
            "vault.toml:6:11: mount.timeout: expected an integer in 1..86400, got a "
            "floating-point number");
  EXPECT_EQ(ErrorOf(WithLine("state", "state = 7")),
            "vault.toml:2:9: mount.state: expected a string, got an integer");
  EXPECT_EQ(ErrorOf(WithLine("force", "force = \"yes\"")),
            "vault.toml:10:9: mount.force: expected true or false, got a string");
  EXPECT_EQ(ErrorOf(WithLine("log_level", "log_level = 3")),
            "vault.toml:8:13: mount.log_level: expected a string, got an integer");
  EXPECT_EQ(ErrorOf(WithLine("fuse_options", "fuse_options = \"allow_other\"")),
            "vault.toml:11:16: mount.fuse_options: expected an array of libfuse option strings, "
            "got a string");
  EXPECT_EQ(ErrorOf(WithLine("fuse_options", "fuse_options = [\"ro\", 1]")),
            "vault.toml:11:23: mount.fuse_options[1]: expected a string, got an integer");
  std::string m = ErrorOf("mount = 3\n");
  EXPECT_EQ(m, "vault.toml:1:9: mount: expected a [mount] table, got an integer");
}

TEST(ClientConfig, OutOfRangeAndBadValuesNameFileLineAndKey) {
  EXPECT_EQ(ErrorOf(WithLine("cache_size", "cache_size = 0")),
            "vault.toml:5:14: mount.cache_size: expected an integer in 1..1048576, got 0");
  EXPECT_EQ(ErrorOf(WithLine("cache_size", "cache_size = 1048577")),
            "vault.toml:5:14: mount.cache_size: expected an integer in 1..1048576, got 1048577");
  EXPECT_EQ(ErrorOf(WithLine("timeout", "constant_rate = 4")),
            "vault.toml:6:17: mount.constant_rate: expected 0 (off) or an integer in 5..3600000, "
            "got 4");
  EXPECT_EQ(ErrorOf(WithLine("timeout", "constant_rate = 3600001")),
            "vault.toml:6:17: mount.constant_rate: expected an integer in 0..3600000, got 3600001");
  EXPECT_EQ(ErrorOf(WithLine("timeout", "timeout = -1")),
            "vault.toml:6:11: mount.timeout: expected an integer in 1..86400, got -1");
  EXPECT_EQ(ErrorOf(WithLine("evict_timeout", "evict_timeout = 86401")),
            "vault.toml:7:17: mount.evict_timeout: expected an integer in 1..86400, got 86401");
  EXPECT_EQ(ErrorOf(WithLine("log_level", "log_level = \"loud\"")),
            "vault.toml:8:13: mount.log_level: expected one of trace, debug, info, warn, error, "
            "got \"loud\"");
  EXPECT_EQ(ErrorOf(WithLine("fuse_options", "fuse_options = [\"\"]")),
            "vault.toml:11:17: mount.fuse_options[0]: expected a libfuse option such as "
            "\"allow_other\", got \"\"");
  EXPECT_EQ(ErrorOf(WithLine("fuse_options", "fuse_options = [\"cache_size=8\"]")),
            "vault.toml:11:17: mount.fuse_options[0]: expected a libfuse option, got "
            "\"cache_size=8\" (an s3oramfs option: set mount.cache_size instead)");
  EXPECT_CONTAINS(ErrorOf(WithLine("fuse_options", "fuse_options = [\"force\"]")),
                  "set mount.force instead");
}

TEST(ClientConfig, RelativePathsAreRefused) {
  EXPECT_EQ(ErrorOf(WithLine("state", "state = \"vault.s3oram\"")),
            "vault.toml:2:9: mount.state: expected the absolute path of the client state file, "
            "got \"vault.s3oram\"");
  EXPECT_EQ(ErrorOf(WithLine("mountpoint", "mountpoint = \"~/vault\"")),
            "vault.toml:3:14: mount.mountpoint: expected the absolute path of a directory to "
            "mount on, got \"~/vault\"");
  EXPECT_EQ(ErrorOf(WithLine("passfile", "passfile = \"vault.pass\"")),
            "vault.toml:4:12: mount.passfile: expected the absolute path of the passphrase file, "
            "got \"vault.pass\"");
  EXPECT_EQ(ErrorOf(WithLine("log_file", "log_file = \"\"")),
            "vault.toml:9:12: mount.log_file: expected the absolute path of a log file, got \"\"");
}

TEST(ClientConfig, MissingTableOrRequiredKey) {
  // An absent table has no line to point at.
  EXPECT_EQ(ErrorOf(""),
            "vault.toml: [mount]: missing required table (expected [mount] with state and "
            "mountpoint)");
  EXPECT_EQ(ErrorOf("# only a comment\n"), ErrorOf(""));
  EXPECT_EQ(ErrorOf(WithLine("state", "")),
            "vault.toml:1:1: [mount]: missing required key 'state' (expected the absolute path "
            "of the client state file)");
  EXPECT_EQ(ErrorOf(WithLine("mountpoint", "")),
            "vault.toml:1:1: [mount]: missing required key 'mountpoint' (expected the absolute "
            "path of the mount point)");
}

TEST(ClientConfig, SyntaxErrorsAreLocated) {
  std::string m = ErrorOf("[mount]\nstate = = 3\n");
  EXPECT_EQ(m.rfind("vault.toml:2:", 0), 0u) << m;
  EXPECT_CONTAINS(m, ": TOML syntax: ");
  m = ErrorOf(std::string(kMinimal) + "state = \"/t\"\n");  // duplicate key
  EXPECT_EQ(m.rfind("vault.toml:4:", 0), 0u) << m;
  EXPECT_CONTAINS(m, "TOML syntax");
}

class ClientConfigFile : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_.Sub(name);
    std::ofstream(path) << text;
    return path;
  }
  testing::TempDir dir_;
};

TEST_F(ClientConfigFile, LoadsAFileAndErrorsNameIt) {
  auto r = LoadClientConfig(Write("vault.toml", kExample));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->state, "/home/alice/vault.s3oram");

  const std::string bad = Write("bad.toml", WithLine("timeout", "timeout = 0"));
  auto b = LoadClientConfig(bad);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(b.status().message(),
            bad + ":6:11: mount.timeout: expected an integer in 1..86400, got 0");
}

TEST_F(ClientConfigFile, MissingUnreadableOrHugeFile) {
  auto r = LoadClientConfig(dir_.Sub("absent.toml"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(r.status().message(), "config file " + dir_.Sub("absent.toml") + " does not exist");

  auto d = LoadClientConfig(dir_.path());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Status::Code::kIoError);
  EXPECT_EQ(d.status().message(), "config file " + dir_.path() + " is not a regular file");

  if (::geteuid() != 0) {  // root reads mode-000 files anyway
    const std::string path = Write("secret.toml", kExample);
    ASSERT_EQ(::chmod(path.c_str(), 0), 0);
    auto u = LoadClientConfig(path);
    ASSERT_FALSE(u.ok());
    EXPECT_EQ(u.status().code(), Status::Code::kIoError);
    EXPECT_CONTAINS(u.status().message(), "Permission denied");
  }

  // Over 1 MiB is refused before parsing, even if it is valid TOML.
  const std::string huge =
      Write("huge.toml", std::string(kMinimal) + "#" + std::string(1 << 20, 'x') + "\n");
  auto h = LoadClientConfig(huge);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(h.status().message(), "config file " + huge + " is larger than 1048576 bytes");
  // Exactly 1 MiB is fine.
  std::string fits = kMinimal;
  fits += "#" + std::string((1 << 20) - fits.size() - 2, 'x') + "\n";
  ASSERT_EQ(fits.size(), std::size_t{1} << 20);
  auto f = LoadClientConfig(Write("fits.toml", fits));
  EXPECT_TRUE(f.ok()) << f.status().ToString();
}

}  // namespace
}  // namespace s3oram::fs

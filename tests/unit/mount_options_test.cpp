// The s3oramfs-fused command line in both roles: daemon and mount(8) helper.
#include "fused/mount_options.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
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

Result<MountCommand> Parse(std::vector<std::string> args) {
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return ParseMountCommand(static_cast<int>(argv.size()), argv.data());
}

std::string Joined(const MountCommand& c) {
  std::string all;
  for (const auto& a : c.fuse_args) all += a + " ";
  return all;
}

TEST(MountOptionsTest, RoleFromArgv0) {
  EXPECT_EQ(InvocationFromArgv0("/sbin/mount.s3oramfs"), Invocation::kMountHelper);
  EXPECT_EQ(InvocationFromArgv0("mount.fuse.s3oramfs"), Invocation::kMountHelper);
  EXPECT_EQ(InvocationFromArgv0("/usr/sbin/s3oramfs-fused"), Invocation::kDaemon);
  EXPECT_EQ(InvocationFromArgv0("mount.s3oramfsx"), Invocation::kDaemon);
}

TEST(MountOptionsTest, DaemonForegroundWithOwnOptions) {
  auto c = Parse({"s3oramfs-fused", "/nonexistent/state.db", "/tmp", "-f", "-o",
                  "cache_size=16,log_file=/tmp/l,log_level=debug,readahead=4,pipeline=3,"
                  "constant_rate=250,allow_other"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->invocation, Invocation::kDaemon);
  EXPECT_EQ(c->state, "/nonexistent/state.db");
  EXPECT_EQ(c->mountpoint, "/tmp");
  EXPECT_TRUE(c->foreground);
  EXPECT_EQ(c->cache_mib, 16u);
  EXPECT_EQ(c->readahead_blocks, 4u);
  EXPECT_EQ(c->pipeline_accesses, 3u);
  EXPECT_EQ(c->constant_rate_ms, 250u);
  EXPECT_EQ(c->log_file, "/tmp/l");
  EXPECT_EQ(c->log_level, "debug");
  const std::string all = Joined(*c);
  EXPECT_NE(all.find("allow_other"), std::string::npos) << all;
  EXPECT_NE(all.find("subtype=s3oramfs"), std::string::npos) << all;
  EXPECT_NE(all.find("default_permissions"), std::string::npos) << all;
  EXPECT_NE(all.find("fsname=/nonexistent/state.db"), std::string::npos) << all;
  EXPECT_EQ(all.find("cache_size"), std::string::npos) << all;
  EXPECT_EQ(all.find("log_file"), std::string::npos) << all;
  EXPECT_EQ(all.find("readahead"), std::string::npos) << all;
  EXPECT_EQ(all.find("pipeline"), std::string::npos) << all;
  EXPECT_EQ(all.find("constant_rate"), std::string::npos) << all;
}

TEST(MountOptionsTest, FstabOptionsAreDiscarded) {
  auto c = Parse({"s3oramfs-fused", "s", "/tmp", "-o",
                  "_netdev,nofail,auto,noauto,user,nouser,users,defaults,x-systemd.automount,ro"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::string all = Joined(*c);
  for (const char* gone : {"_netdev", "nofail", "noauto", "nouser", "users", "defaults", "x-"}) {
    EXPECT_EQ(all.find(gone), std::string::npos) << gone << " in " << all;
  }
  EXPECT_NE(all.find("ro"), std::string::npos);
  EXPECT_FALSE(c->foreground);
}

TEST(MountOptionsTest, FsnameIsEscaped) {
  EXPECT_EQ(EscapeOptionValue("a,b\\c"), "a\\,b\\\\c");
  auto c = Parse({"s3oramfs-fused", "/no/such/dir/a,b", "/tmp"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NE(Joined(*c).find("fsname=/no/such/dir/a\\,b"), std::string::npos) << Joined(*c);
}

TEST(MountOptionsTest, MountHelperRole) {
  auto c = Parse({"/sbin/mount.s3oramfs", "/state", "/tmp", "-o", "rw,_netdev,cache_size=8"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->invocation, Invocation::kMountHelper);
  EXPECT_EQ(c->state, "/state");
  EXPECT_EQ(c->mountpoint, "/tmp");
  EXPECT_FALSE(c->foreground);  // a helper always detaches
  EXPECT_FALSE(c->fake);
  EXPECT_EQ(c->cache_mib, 8u);
  // -f is "fake" for mount(8) helpers; -n, -s, -v are accepted; -t is ignored.
  auto f = Parse({"mount.fuse.s3oramfs", "/state", "/tmp", "-fnsv", "-t", "fuse.s3oramfs",
                  "-o", "rw"});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->fake);
  EXPECT_TRUE(f->verbose);
  EXPECT_FALSE(f->foreground);
  auto n = Parse({"mount.s3oramfs", "/state", "/tmp", "-N", "/proc/1/ns/mnt"});
  EXPECT_FALSE(n.ok());
  auto bad = Parse({"mount.s3oramfs", "/state", "/tmp", "-q"});
  EXPECT_FALSE(bad.ok());
}

TEST(MountOptionsTest, Errors) {
  EXPECT_FALSE(Parse({"s3oramfs-fused"}).ok());
  EXPECT_FALSE(Parse({"s3oramfs-fused", "state"}).ok());
  EXPECT_FALSE(Parse({"s3oramfs-fused", "state", "/tmp", "extra"}).ok());
  for (const char* bad : {"cache_size=0", "cache_size=-1", "cache_size=abc", "cache_size=99999999",
                          "log_level=loud", "readahead=17", "readahead=-1", "readahead=x",
                          "pipeline=0", "pipeline=9", "constant_rate=4", "constant_rate=-1",
                          "constant_rate=3600001", "constant_rate=1s"}) {
    auto c = Parse({"s3oramfs-fused", "state", "/tmp", "-o", bad});
    EXPECT_FALSE(c.ok()) << bad;
    if (!c.ok()) {
      EXPECT_FALSE(c.status().message().empty());
    }
  }
  auto h = Parse({"s3oramfs-fused", "--help"});
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->show_help);
}

// --config FILE: a client config file (fused/client_config.h) instead of
// STATE and MOUNTPOINT.
class MountOptionsConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = Write("vault.toml",
                    "[mount]\n"
                    "state = \"/no/such/dir/vault.s3oram\"\n"
                    "mountpoint = \"/no/such/dir/vault\"\n"
                    "passfile = \"/no/such/dir/vault.pass\"\n"
                    "cache_size = 16\n"
                    "timeout = 12\n"
                    "evict_timeout = 34\n"
                    "log_level = \"debug\"\n"
                    "log_file = \"/no/such/dir/vault.log\"\n"
                    "force = true\n"
                    "fuse_options = [\"allow_other\", \"max_read=131072\", \"x_list=a,b\"]\n");
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_.Sub(name);
    std::ofstream(path) << text;
    return path;
  }
  testing::TempDir dir_;
  std::string config_;
};

TEST_F(MountOptionsConfigTest, FileGivesStateMountpointAndOptions) {
  using Argv = std::vector<std::string>;
  for (const Argv& argv : {Argv{"s3oramfs-fused", "--config", config_, "-f"},
                           Argv{"s3oramfs-fused", "-f", "--config=" + config_}}) {
    auto c = Parse(argv);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->config_file, config_);
    EXPECT_EQ(c->state, "/no/such/dir/vault.s3oram");
    EXPECT_EQ(c->mountpoint, "/no/such/dir/vault");
    EXPECT_EQ(c->passfile, "/no/such/dir/vault.pass");
    EXPECT_EQ(c->cache_mib, 16u);
    EXPECT_EQ(c->timeout_seconds, 12u);
    EXPECT_EQ(c->evict_timeout_seconds, 34u);
    EXPECT_EQ(c->log_level, "debug");
    EXPECT_EQ(c->log_file, "/no/such/dir/vault.log");
    EXPECT_TRUE(c->force);
    EXPECT_TRUE(c->foreground);
    const std::string all = Joined(*c);
    EXPECT_NE(all.find("allow_other"), std::string::npos) << all;
    EXPECT_NE(all.find("max_read=131072"), std::string::npos) << all;
    // One element is one option: its comma stays escaped for libfuse.
    EXPECT_NE(all.find("x_list=a\\,b"), std::string::npos) << all;
    EXPECT_NE(all.find("fsname=/no/such/dir/vault.s3oram"), std::string::npos) << all;
    EXPECT_NE(all.find("subtype=s3oramfs"), std::string::npos) << all;
    EXPECT_EQ(all.find("--config"), std::string::npos) << all;
    EXPECT_EQ(all.find("vault.toml"), std::string::npos) << all;
  }
}

TEST_F(MountOptionsConfigTest, CommandLineOptionsOverrideTheFile) {
  auto c = Parse({"s3oramfs-fused", "--config", config_, "-o",
                  "cache_size=8,log_level=warn,passfile=/other.pass,timeout=5,ro"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cache_mib, 8u);
  EXPECT_EQ(c->log_level, "warn");
  EXPECT_EQ(c->passfile, "/other.pass");
  EXPECT_EQ(c->timeout_seconds, 5u);
  EXPECT_EQ(c->evict_timeout_seconds, 34u);  // not overridden: the file's
  EXPECT_EQ(c->log_file, "/no/such/dir/vault.log");
  EXPECT_FALSE(c->foreground);
  const std::string all = Joined(*c);
  // The file's libfuse options come first, so a later -o given on the
  // command line wins in libfuse.
  ASSERT_NE(all.find(",ro"), std::string::npos) << all;
  EXPECT_LT(all.find("allow_other"), all.find(",ro")) << all;

  // Without force in the file, -o force still sets it; absent keys keep the
  // daemon's defaults.
  const std::string minimal =
      Write("minimal.toml", "[mount]\nstate = \"/s\"\nmountpoint = \"/m\"\n");
  auto m = Parse({"s3oramfs-fused", "--config", minimal});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const MountCommand defaults;
  EXPECT_FALSE(m->force);
  EXPECT_FALSE(m->refresh_state);
  EXPECT_EQ(m->cache_mib, defaults.cache_mib);
  EXPECT_EQ(m->log_level, defaults.log_level);
  EXPECT_EQ(m->timeout_seconds, defaults.timeout_seconds);
  EXPECT_EQ(m->passfile, "");
  auto f = Parse({"s3oramfs-fused", "--config", minimal, "-o", "force"});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->force);
  EXPECT_FALSE(f->refresh_state);
  auto r = Parse({"s3oramfs-fused", "--config", minimal, "-o", "refresh_state"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->refresh_state);
  // A bad value on the command line is still an error.
  EXPECT_FALSE(Parse({"s3oramfs-fused", "--config", minimal, "-o", "cache_size=0"}).ok());
}

TEST_F(MountOptionsConfigTest, Errors) {
  // STATE and MOUNTPOINT come from the file only.
  for (const auto& argv : {std::vector<std::string>{"s3oramfs-fused", "--config", config_, "/s"},
                           std::vector<std::string>{"s3oramfs-fused", "/s", "/tmp", "--config",
                                                    config_}}) {
    auto c = Parse(argv);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("with --config, STATE and MOUNTPOINT come from the config "
                                        "file"),
              std::string::npos)
        << c.status().message();
  }
  auto twice = Parse({"s3oramfs-fused", "--config", config_, "--config=" + config_});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("more than once"), std::string::npos);
  EXPECT_FALSE(Parse({"s3oramfs-fused", "--config"}).ok());
  EXPECT_FALSE(Parse({"s3oramfs-fused", "--config="}).ok());

  auto missing = Parse({"s3oramfs-fused", "--config", dir_.Sub("absent.toml")});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "config file " + dir_.Sub("absent.toml") + " does not exist");
  // The file's errors are flagged as such (the daemon then prints no usage);
  // command-line errors are not.
  {
    const std::string absent = dir_.Sub("absent.toml");
    const char* argv[] = {"s3oramfs-fused", "--config", absent.c_str()};
    bool config_error = false;
    EXPECT_FALSE(ParseMountCommand(3, argv, &config_error).ok());
    EXPECT_TRUE(config_error);
    const char* extra[] = {"s3oramfs-fused", "--config", config_.c_str(), "/s"};
    EXPECT_FALSE(ParseMountCommand(4, extra, &config_error).ok());
    EXPECT_FALSE(config_error);
  }

  const std::string bad = Write("bad.toml", "[mount]\nstate = \"/s\"\nmountpoint = \"m\"\n");
  auto b = Parse({"s3oramfs-fused", "--config", bad});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(b.status().message(), bad + ":3:14: mount.mountpoint: expected the absolute path of "
                                        "a directory to mount on, got \"m\"");

  // The mount helper keeps mount(8)'s convention: no --config.
  auto helper = Parse({"/sbin/mount.s3oramfs", "--config", config_});
  ASSERT_FALSE(helper.ok());
  EXPECT_NE(helper.status().message().find("--config"), std::string::npos);

  // --help does not need a readable file; "--config" as an -o value is not the option.
  auto h = Parse({"s3oramfs-fused", "--config", dir_.Sub("absent.toml"), "--help"});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(h->show_help);
  auto o = Parse({"s3oramfs-fused", "/s", "/tmp", "-o", "--config"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->config_file, "");
  EXPECT_EQ(o->state, "/s");
}

TEST(MountOptionsTest, UsageDocumentsConfig) {
  const std::string usage = UsageText("s3oramfs-fused");
  EXPECT_NE(usage.find("s3oramfs-fused --config FILE"), std::string::npos) << usage;
}

}  // namespace
}  // namespace s3oram::fs

// The s3oramfs-fused command line in both roles: daemon and mount(8) helper.
#include "fused/mount_options.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

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
                  "cache_size=16,log_file=/tmp/l,log_level=debug,allow_other"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->invocation, Invocation::kDaemon);
  EXPECT_EQ(c->state, "/nonexistent/state.db");
  EXPECT_EQ(c->mountpoint, "/tmp");
  EXPECT_TRUE(c->foreground);
  EXPECT_EQ(c->cache_mib, 16u);
  EXPECT_EQ(c->log_file, "/tmp/l");
  EXPECT_EQ(c->log_level, "debug");
  const std::string all = Joined(*c);
  EXPECT_NE(all.find("allow_other"), std::string::npos) << all;
  EXPECT_NE(all.find("subtype=s3oramfs"), std::string::npos) << all;
  EXPECT_NE(all.find("default_permissions"), std::string::npos) << all;
  EXPECT_NE(all.find("fsname=/nonexistent/state.db"), std::string::npos) << all;
  EXPECT_EQ(all.find("cache_size"), std::string::npos) << all;
  EXPECT_EQ(all.find("log_file"), std::string::npos) << all;
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
                          "log_level=loud"}) {
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

}  // namespace
}  // namespace s3oram::fs

// s3oramfs-fused as mount(8) helper (/sbin/mount.s3oramfs and
// /sbin/mount.fuse.s3oramfs), and the daemon's own start-up contract:
// backgrounding, errors on stderr, SIGTERM, its -o options, --config FILE.
//
// The helper tests need root: they install the two links in /sbin for as
// long as they run (serialized across test processes by a lock file) and
// remove them afterwards. A path there that is not a link to this build is
// never overwritten.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/fs_fixture.h"

namespace s3oram {
namespace {

using testing::CmdResult;
using testing::FileHasContent;
using testing::FindMount;
using testing::FsOptions;
using testing::IsS3oramMounted;
using testing::MountedFs;
using testing::PatternBytes;
using testing::RunCmd;
namespace sfs = std::filesystem;

std::string DaemonPath() {
  std::error_code ec;
  auto p = sfs::canonical(testing::FusedPath(), ec);
  return ec ? testing::FusedPath() : p.string();
}

// PIDs of running s3oramfs-fused processes (this build) with `mnt` (or, if
// not empty, `config`: a daemon started with --config names no mount point)
// among their arguments.
std::vector<pid_t> DaemonPids(const std::string& mnt, const std::string& config = "") {
  std::vector<pid_t> out;
  const std::string exe = DaemonPath();
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  while (dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end) continue;
    std::error_code ec;
    std::string link = sfs::read_symlink("/proc/" + std::string(e->d_name) + "/exe", ec).string();
    if (ec || link.rfind(exe, 0) != 0) continue;  // may carry " (deleted)" after a rebuild
    std::string cmdline = testing::ReadWholeFile("/proc/" + std::string(e->d_name) + "/cmdline");
    std::size_t start = 0;
    bool match = false;
    while (start < cmdline.size()) {
      std::size_t z = cmdline.find('\0', start);
      if (z == std::string::npos) z = cmdline.size();
      if (cmdline.compare(start, z - start, mnt) == 0) match = true;
      if (!config.empty() && (cmdline.compare(start, z - start, config) == 0 ||
                              cmdline.compare(start, z - start, "--config=" + config) == 0)) {
        match = true;
      }
      start = z + 1;
    }
    if (match) out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return out;
}

// Waits until `mnt` is unmounted and no daemon of ours serves it (`config`:
// as for DaemonPids).
::testing::AssertionResult WaitDaemonGone(const std::string& mnt,
                                          std::chrono::seconds timeout = std::chrono::seconds(120),
                                          const std::string& config = "") {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!FindMount(mnt) && DaemonPids(mnt, config).empty()) return ::testing::AssertionSuccess();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ::testing::AssertionFailure() << "after " << timeout.count() << " s: mounted=" << !!FindMount(mnt)
                                       << ", daemons=" << DaemonPids(mnt, config).size();
}

// Cleans up a background daemon serving `mnt` (one this test started through
// mount(8) or without -f): lazy unmount, then SIGTERM/SIGKILL to the PIDs
// found for this build and this mount point only.
class BackgroundMountGuard {
 public:
  // `config`: the --config file of daemons started with one.
  explicit BackgroundMountGuard(std::string mnt, std::string config = "")
      : mnt_(std::move(mnt)), config_(std::move(config)) {}
  ~BackgroundMountGuard() {
    if (FindMount(mnt_)) RunCmd({"umount", mnt_}, std::chrono::seconds(30));
    if (WaitDaemonGone(mnt_, std::chrono::seconds(60), config_)) return;
    if (FindMount(mnt_)) RunCmd({"umount", "-l", mnt_}, std::chrono::seconds(30));
    for (pid_t pid : DaemonPids(mnt_, config_)) ::kill(pid, SIGTERM);
    if (WaitDaemonGone(mnt_, std::chrono::seconds(30), config_)) return;
    for (pid_t pid : DaemonPids(mnt_, config_)) ::kill(pid, SIGKILL);
    WaitDaemonGone(mnt_, std::chrono::seconds(10), config_);
  }

 private:
  std::string mnt_;
  std::string config_;
};

// The two helper links in /sbin, for the lifetime of this object.
class HelperLinks {
 public:
  static constexpr const char* kLinks[] = {"/sbin/mount.s3oramfs", "/sbin/mount.fuse.s3oramfs"};

  // nullptr and *error on failure.
  static std::unique_ptr<HelperLinks> Install(std::string* error) {
    std::unique_ptr<HelperLinks> h(new HelperLinks());
    h->lock_fd_ = ::open("/tmp/s3oramfs-mount-helper-test.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (h->lock_fd_ < 0 || ::flock(h->lock_fd_, LOCK_EX) != 0) {
      *error = std::string("lock file: ") + std::strerror(errno);
      return nullptr;
    }
    const std::string daemon = DaemonPath();
    for (const char* link : kLinks) {
      std::error_code ec;
      auto st = sfs::symlink_status(link, ec);
      if (!ec && sfs::exists(st)) {
        std::string target = sfs::is_symlink(st) ? sfs::read_symlink(link, ec).string() : "";
        if (target != daemon) {
          *error = std::string(link) + " already exists and is not a link to " + daemon +
                   " (it points to '" + target +
                   "'); the test will not overwrite it. Remove it or run the test elsewhere.";
          return nullptr;
        }
      } else if (::symlink(daemon.c_str(), link) != 0) {
        *error = "symlink " + daemon + " " + link + ": " + std::strerror(errno);
        return nullptr;
      }
      h->installed_.push_back(link);
    }
    return h;
  }

  ~HelperLinks() {
    const std::string daemon = DaemonPath();
    for (const auto& link : installed_) {
      std::error_code ec;
      if (sfs::is_symlink(sfs::symlink_status(link, ec)) && sfs::read_symlink(link, ec).string() == daemon) {
        ::unlink(link.c_str());
      }
    }
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
  }

 private:
  HelperLinks() = default;
  int lock_fd_ = -1;
  std::vector<std::string> installed_;
};

class FsMountHelperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::ReferenceDir().empty()) GTEST_SKIP() << "needs the s3oramfs daemon (reference mode)";
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (installs /sbin/mount.s3oramfs)";
    FsOptions o;
    o.mount = false;
    fs_ = MountedFs::Create(o);
    ASSERT_TRUE(fs_);
    guard_ = std::make_unique<BackgroundMountGuard>(fs_->root());
    std::string error;
    links_ = HelperLinks::Install(&error);
    ASSERT_TRUE(links_) << error;
  }
  void TearDown() override {
    guard_.reset();  // the daemon ends before the links, the cluster and the directory go
    links_.reset();
  }
  const std::string& mnt() const { return fs_->root(); }

  std::unique_ptr<MountedFs> fs_;
  std::unique_ptr<BackgroundMountGuard> guard_;
  std::unique_ptr<HelperLinks> links_;
};

TEST_F(FsMountHelperTest, MountTypeS3oramfsAndFuseS3oramfs) {
  CmdResult m = RunCmd({"mount", "-t", "s3oramfs", "-o", fs_->pass_option(), fs_->state(), mnt()}, std::chrono::seconds(60));
  ASSERT_EQ(m.exit_code, 0) << m.output;
  // The helper returns only once the mount is live.
  auto entry = FindMount(mnt());
  ASSERT_TRUE(entry) << "mount(8) returned but nothing is mounted on " << mnt();
  EXPECT_EQ(entry->fstype, "fuse.s3oramfs");
  EXPECT_EQ(entry->source, fs_->state());
  EXPECT_EQ(DaemonPids(mnt()).size(), 1u);
  std::string data = PatternBytes(50000, 1);
  ASSERT_TRUE(testing::WriteFile(fs_->Path("hello"), data));
  EXPECT_TRUE(FileHasContent(fs_->Path("hello"), data));
  CmdResult u = RunCmd({"umount", mnt()}, std::chrono::seconds(60));
  ASSERT_EQ(u.exit_code, 0) << u.output;
  ASSERT_TRUE(WaitDaemonGone(mnt()));

  m = RunCmd({"mount", "-t", "fuse.s3oramfs", "-o", fs_->pass_option(), fs_->state(), mnt()}, std::chrono::seconds(60));
  ASSERT_EQ(m.exit_code, 0) << m.output;
  ASSERT_TRUE(IsS3oramMounted(mnt()));
  EXPECT_TRUE(FileHasContent(fs_->Path("hello"), data));
  u = RunCmd({"umount", mnt()}, std::chrono::seconds(60));
  ASSERT_EQ(u.exit_code, 0) << u.output;
  ASSERT_TRUE(WaitDaemonGone(mnt()));
}

TEST_F(FsMountHelperTest, FstabOnlyOptionsAreDiscarded) {
  CmdResult m = RunCmd({"mount", "-t", "s3oramfs", "-o", "_netdev,nofail,noauto," + fs_->pass_option(), fs_->state(), mnt()},
                       std::chrono::seconds(60));
  ASSERT_EQ(m.exit_code, 0) << m.output;
  ASSERT_TRUE(IsS3oramMounted(mnt()));
  ASSERT_TRUE(testing::WriteFile(fs_->Path("a"), "a"));
  ASSERT_EQ(RunCmd({"umount", mnt()}).exit_code, 0);
  ASSERT_TRUE(WaitDaemonGone(mnt()));
  // The helper called directly, as mount(8) would, with all of them.
  m = RunCmd({"/sbin/mount.s3oramfs", fs_->state(), mnt(), "-o",
              "rw,_netdev,nofail,auto,noauto,user,nouser,users," + fs_->pass_option()},
             std::chrono::seconds(60));
  ASSERT_EQ(m.exit_code, 0) << m.output;
  ASSERT_TRUE(IsS3oramMounted(mnt()));
  EXPECT_TRUE(FileHasContent(fs_->Path("a"), "a"));
  ASSERT_EQ(RunCmd({"umount", mnt()}).exit_code, 0);
  ASSERT_TRUE(WaitDaemonGone(mnt()));
}

TEST_F(FsMountHelperTest, FakeFlagMountsNothing) {
  CmdResult m = RunCmd({"/sbin/mount.s3oramfs", fs_->state(), mnt(), "-f", "-o", "rw"},
                       std::chrono::seconds(60));
  EXPECT_EQ(m.exit_code, 0) << m.output;
  EXPECT_FALSE(FindMount(mnt()));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(FindMount(mnt()));
  EXPECT_TRUE(DaemonPids(mnt()).empty());
  // mount -f (fake) through mount(8) as well.
  m = RunCmd({"mount", "-f", "-t", "s3oramfs", fs_->state(), mnt()}, std::chrono::seconds(60));
  EXPECT_EQ(m.exit_code, 0) << m.output;
  EXPECT_FALSE(FindMount(mnt()));
  EXPECT_TRUE(DaemonPids(mnt()).empty());
}

TEST_F(FsMountHelperTest, HelperReportsErrors) {
  CmdResult m = RunCmd({"mount", "-t", "s3oramfs", fs_->Scratch("no-such-state"), mnt()},
                       std::chrono::seconds(60));
  EXPECT_NE(m.exit_code, 0) << m.output;
  EXPECT_FALSE(m.output.empty());
  EXPECT_FALSE(FindMount(mnt()));
  EXPECT_TRUE(DaemonPids(mnt()).empty());
}

// --- the daemon role ---------------------------------------------------------

class FsDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::ReferenceDir().empty()) GTEST_SKIP() << "needs the s3oramfs daemon (reference mode)";
  }
};

TEST_F(FsDaemonTest, BackgroundStartReturnsOnceMountedAndSigtermUnmounts) {
  FsOptions o;
  o.mount = false;
  auto fs = MountedFs::Create(o);
  ASSERT_TRUE(fs);
  BackgroundMountGuard guard(fs->root());
  CmdResult r = RunCmd({testing::FusedPath(), fs->state(), fs->root(), "-o", fs->pass_option()},
                       std::chrono::seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "") << "stderr must stay silent after a successful mount";
  ASSERT_TRUE(IsS3oramMounted(fs->root())) << "returned before the mount was live";
  auto pids = DaemonPids(fs->root());
  ASSERT_EQ(pids.size(), 1u);
  std::string data = PatternBytes(30000, 2);
  ASSERT_TRUE(testing::WriteFile(fs->Path("f"), data));  // not fsynced: SIGTERM must flush
  ASSERT_EQ(::kill(pids[0], SIGTERM), 0);
  ASSERT_TRUE(WaitDaemonGone(fs->root()));
  ASSERT_TRUE(fs->Mount());
  EXPECT_TRUE(FileHasContent(fs->Path("f"), data));
  // SIGTERM to a foreground daemon: clean exit 0, mount gone, data written back.
  std::string more = PatternBytes(20000, 4);
  ASSERT_TRUE(testing::WriteFile(fs->Path("g"), more));
  EXPECT_TRUE(fs->SignalAndWait(SIGTERM));
  ASSERT_TRUE(fs->Mount());
  EXPECT_TRUE(FileHasContent(fs->Path("f"), data));
  EXPECT_TRUE(FileHasContent(fs->Path("g"), more));
}

// A wrong, unreadable-by-policy or missing passphrase never yields a mount
// and says why; after `s3oram passwd` the new passphrase mounts the same
// data and the old one is refused.
TEST_F(FsDaemonTest, WrongPassphraseNeverMountsAndPasswdTakesEffect) {
  FsOptions o;
  o.mount = false;
  auto fs = MountedFs::Create(o);
  ASSERT_TRUE(fs);
  BackgroundMountGuard guard(fs->root());
  auto write_secret = [](const std::string& path, std::string_view text) {
    return WritePrivateFile(
        path, std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
  };
  const std::string wrong = fs->Scratch("wrong-pass"), loose = fs->Scratch("loose-pass"),
                    fresh = fs->Scratch("new-pass");
  ASSERT_TRUE(write_secret(wrong, "not the passphrase").ok());
  ASSERT_TRUE(write_secret(loose, testing::kTestPassphrase).ok());
  ASSERT_EQ(::chmod(loose.c_str(), 0644), 0);
  ASSERT_TRUE(write_secret(fresh, "a brand new passphrase\n").ok());

  struct Case {
    std::vector<std::string> argv;
    const char* expect;
  };
  const std::string fused = testing::FusedPath();
  for (const Case& c : std::vector<Case>{
           {{fused, fs->state(), fs->root(), "-o", "passfile=" + wrong}, "wrong passphrase"},
           {{fused, fs->state(), fs->root(), "-f", "-o", "passfile=" + wrong}, "wrong passphrase"},
           {{fused, fs->state(), fs->root(), "-o", "passfile=" + loose}, "chmod 600"},
           {{fused, fs->state(), fs->root()}, "passfile"}}) {  // no source, no terminal
    CmdResult r = RunCmd(c.argv, std::chrono::seconds(60));
    std::string cmd;
    for (const auto& a : c.argv) cmd += a + " ";
    EXPECT_NE(r.exit_code, 0) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << cmd << "\n" << r.output;
    EXPECT_FALSE(FindMount(fs->root())) << cmd;
  }

  ASSERT_TRUE(fs->Mount());
  const std::string data = PatternBytes(50000, 9);
  ASSERT_TRUE(testing::WriteFile(fs->Path("kept"), data));
  ASSERT_TRUE(fs->Unmount());

  CmdResult pw = RunCmd({S3ORAM_TEST_CLI, "passwd", "--state", fs->state(), "--passfile",
                         fs->passfile(), "--new-passfile", fresh, "--insecure-kdf"},
                        std::chrono::seconds(60));
  ASSERT_EQ(pw.exit_code, 0) << pw.output;

  CmdResult old_pass = RunCmd({fused, fs->state(), fs->root(), "-o", fs->pass_option()},
                              std::chrono::seconds(60));
  EXPECT_NE(old_pass.exit_code, 0) << old_pass.output;
  EXPECT_NE(old_pass.output.find("wrong passphrase"), std::string::npos) << old_pass.output;
  EXPECT_FALSE(FindMount(fs->root()));

  CmdResult new_pass = RunCmd({fused, fs->state(), fs->root(), "-o", "passfile=" + fresh},
                              std::chrono::seconds(60));
  ASSERT_EQ(new_pass.exit_code, 0) << new_pass.output;
  ASSERT_TRUE(IsS3oramMounted(fs->root()));
  EXPECT_TRUE(FileHasContent(fs->Path("kept"), data));
  ASSERT_EQ(RunCmd({"umount", fs->root()}, std::chrono::seconds(60)).exit_code, 0);
  ASSERT_TRUE(WaitDaemonGone(fs->root()));
}

TEST_F(FsDaemonTest, StartupErrorsGoToStderr) {
  FsOptions o;
  o.mount = false;
  auto fs = MountedFs::Create(o);
  ASSERT_TRUE(fs);
  BackgroundMountGuard guard(fs->root());
  for (const auto& args : std::vector<std::vector<std::string>>{
           {testing::FusedPath(), fs->Scratch("no-such-state"), fs->root()},
           {testing::FusedPath(), fs->Scratch("no-such-state"), fs->root(), "-f"},
           {testing::FusedPath(), fs->state(), fs->Scratch("no-such-dir"), "-o", fs->pass_option()},
           {testing::FusedPath(), fs->state()},
           {testing::FusedPath(), fs->state(), fs->root(), "-o", "cache_size=notanumber"}}) {
    CmdResult r = RunCmd(args, std::chrono::seconds(60));
    std::string cmd;
    for (const auto& a : args) cmd += a + " ";
    EXPECT_NE(r.exit_code, 0) << cmd << "\n" << r.output;
    EXPECT_NE(r.exit_code, -1) << cmd << " did not exit by itself";
    EXPECT_FALSE(r.output.empty()) << cmd << ": no message";
    EXPECT_FALSE(FindMount(fs->root())) << cmd;
  }
}

TEST_F(FsDaemonTest, OwnOptionsCacheSizeLogFileLogLevel) {
  FsOptions o;
  o.log_to_file = false;
  o.mount = false;
  auto fs = MountedFs::Create(o);
  ASSERT_TRUE(fs);
  const std::string quiet = fs->Scratch("quiet.log"), chatty = fs->Scratch("chatty.log");
  fs->set_mount_opts("cache_size=1,log_file=" + quiet + ",log_level=warn");
  ASSERT_TRUE(fs->Mount());
  // A file half again as large as the 1 MiB write-back cache.
  std::string data = PatternBytes(3 << 19, 3);
  ASSERT_TRUE(testing::WriteFile(fs->Path("big"), data));
  EXPECT_TRUE(FileHasContent(fs->Path("big"), data));
  ASSERT_TRUE(fs->Unmount());
  fs->set_mount_opts("cache_size=1,log_file=" + chatty + ",log_level=debug");
  ASSERT_TRUE(fs->Mount());
  EXPECT_TRUE(FileHasContent(fs->Path("big"), data));
  ASSERT_TRUE(fs->Unmount());
  std::string q = testing::ReadWholeFile(quiet), c = testing::ReadWholeFile(chatty);
  EXPECT_EQ(q.find(" info: "), std::string::npos) << "log_level=warn logged info lines:\n" << q;
  EXPECT_NE(c.find(" info: "), std::string::npos) << "log_level=debug logged no info lines:\n" << c;
}

// A TOML basic string for the paths the tests put in config files.
std::string TomlString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

// s3oramfs-fused --config FILE, as the systemd unit s3oramfs@NAME.service
// runs it (there with -f): state, mount point, passphrase and options all
// come from the file.
TEST_F(FsDaemonTest, ConfigFileMountsAndUnmounts) {
  FsOptions o;
  o.mount = false;
  auto fs = MountedFs::Create(o);
  ASSERT_TRUE(fs);
  const std::string config = sfs::absolute(fs->Scratch("vault.toml")).string();
  const std::string log = sfs::absolute(fs->Scratch("config-mount.log")).string();
  BackgroundMountGuard guard(fs->root(), config);
  {
    std::ofstream out(config);
    out << "# written by " << ::testing::UnitTest::GetInstance()->current_test_info()->name()
        << "\n[mount]\n"
        << "state = " << TomlString(sfs::absolute(fs->state()).string()) << "\n"
        << "mountpoint = " << TomlString(fs->root()) << "\n"
        << "passfile = " << TomlString(sfs::absolute(fs->passfile()).string()) << "\n"
        << "cache_size = 8\n"
        << "timeout = 30\n"
        << "evict_timeout = 300\n"
        << "log_level = \"debug\"\n"
        << "log_file = " << TomlString(log) << "\n"
        << "force = false\n"
        << "fuse_options = [\"noatime\"]\n";
    ASSERT_TRUE(out.good());
  }

  CmdResult r = RunCmd({testing::FusedPath(), "--config", config}, std::chrono::seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "") << "stderr must stay silent after a successful mount";
  auto entry = FindMount(fs->root());
  ASSERT_TRUE(entry) << "returned before the mount was live";
  EXPECT_EQ(entry->fstype, "fuse.s3oramfs");
  EXPECT_EQ(entry->source, sfs::canonical(fs->state()).string());
  EXPECT_NE(entry->options.find("noatime"), std::string::npos)
      << "fuse_options did not reach the mount: " << entry->options;
  EXPECT_EQ(DaemonPids(fs->root(), config).size(), 1u);
  const std::string data = PatternBytes(70000, 11);
  ASSERT_TRUE(testing::WriteFile(fs->Path("from-config"), data));
  EXPECT_TRUE(FileHasContent(fs->Path("from-config"), data));
  CmdResult u = RunCmd({"fusermount3", "-u", fs->root()}, std::chrono::seconds(60));
  ASSERT_EQ(u.exit_code, 0) << u.output;
  ASSERT_TRUE(WaitDaemonGone(fs->root(), std::chrono::seconds(120), config));
  // log_level = "debug" and log_file took effect.
  EXPECT_NE(testing::ReadWholeFile(log).find(" info: "), std::string::npos)
      << "no info lines in " << log;

  // The data are there on the next mount, with a command-line -o overriding
  // the file's log_file.
  const std::string other_log = sfs::absolute(fs->Scratch("override.log")).string();
  r = RunCmd({testing::FusedPath(), "--config=" + config, "-o", "log_file=" + other_log},
             std::chrono::seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(IsS3oramMounted(fs->root()));
  EXPECT_TRUE(FileHasContent(fs->Path("from-config"), data));
  u = RunCmd({"fusermount3", "-u", fs->root()}, std::chrono::seconds(60));
  ASSERT_EQ(u.exit_code, 0) << u.output;
  ASSERT_TRUE(WaitDaemonGone(fs->root(), std::chrono::seconds(120), config));
  EXPECT_NE(testing::ReadWholeFile(other_log).find(" info: "), std::string::npos)
      << "-o log_file did not override the file's";
}

// A bad config file: non-zero exit, the file:line:col message on stderr,
// nothing mounted and no daemon left.
TEST_F(FsDaemonTest, BadConfigFileMountsNothing) {
  FsOptions o;
  o.mount = false;
  auto fs = MountedFs::Create(o);
  ASSERT_TRUE(fs);
  const std::string config = sfs::absolute(fs->Scratch("bad.toml")).string();
  BackgroundMountGuard guard(fs->root(), config);
  const std::string head = "[mount]\nstate = " + TomlString(sfs::absolute(fs->state()).string()) +
                           "\nmountpoint = " + TomlString(fs->root()) + "\npassfile = " +
                           TomlString(sfs::absolute(fs->passfile()).string()) + "\n";
  struct Case {
    std::string text;
    std::string expect;  // on stderr
  };
  for (const Case& c : std::vector<Case>{
           {head + "cache_size = 0\n",
            config + ":5:14: mount.cache_size: expected an integer in 1..1048576, got 0"},
           {head + "cache_sise = 8\n", config + ":5:1: mount.cache_sise: unknown key"},
           {"[mount]\nstate = \"fs.s3oram\"\nmountpoint = " + TomlString(fs->root()) + "\n",
            config + ":2:9: mount.state: expected the absolute path of the client state file, got "
                     "\"fs.s3oram\""},
           {"[mount]\nmountpoint = " + TomlString(fs->root()) + "\n",
            config + ":1:1: [mount]: missing required key 'state'"},
           {"", config + ": [mount]: missing required table"}}) {
    {
      std::ofstream out(config, std::ios::trunc);
      out << c.text;
    }
    CmdResult r = RunCmd({testing::FusedPath(), "--config", config}, std::chrono::seconds(60));
    EXPECT_NE(r.exit_code, 0) << c.text << "\n" << r.output;
    EXPECT_NE(r.exit_code, -1) << c.text << ": did not exit by itself";
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.text << "\n" << r.output;
    EXPECT_EQ(r.output.find("usage:"), std::string::npos) << "the usage buries the message:\n"
                                                          << r.output;
    EXPECT_FALSE(FindMount(fs->root())) << c.text;
    EXPECT_TRUE(DaemonPids(fs->root(), config).empty()) << c.text;
  }
  // A missing file, and STATE MOUNTPOINT given as well.
  CmdResult r = RunCmd({testing::FusedPath(), "--config", fs->Scratch("absent.toml")},
                       std::chrono::seconds(60));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("absent.toml does not exist"), std::string::npos) << r.output;
  {
    std::ofstream out(config, std::ios::trunc);
    out << head;
  }
  r = RunCmd({testing::FusedPath(), "--config", config, fs->state(), fs->root()},
             std::chrono::seconds(60));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("with --config"), std::string::npos) << r.output;
  EXPECT_FALSE(FindMount(fs->root()));
}

}  // namespace
}  // namespace s3oram

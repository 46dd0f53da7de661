// Reliability of a real mount: one writer per filesystem (the lease on the
// servers, the lock on the state file), forced takeover and fencing, stale
// state files, and a server that hangs (SIGSTOP) making requests fail with
// EIO after the configured timeout instead of hanging the mount.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "tests/integration/fs_fixture.h"
#include "tests/integration/run_cli.h"

namespace s3oram::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Starts a second daemon in the background (no -f): exit 0 once mounted.
CmdResult MountInBackground(const MountedFs& fs, const std::string& state, const std::string& mnt,
                            const std::string& extra_opts) {
  std::string opts = fs.pass_option() + ",log_file=" + fs.Scratch("second-daemon.log");
  if (!extra_opts.empty()) opts += "," + extra_opts;
  return RunCmd({FusedPath(), state, mnt, "-o", opts}, std::chrono::seconds(60));
}

// fusermount3 -u returns once the kernel detached the mount; the daemon then
// still writes back, backs the state up and releases the lease, holding the
// state file's lock until it exits. Waits (bounded) for that lock.
bool WaitForStateUnlocked(const std::string& state) {
  int fd = ::open(state.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool free = false;
  for (int i = 0; i < 600 && !free; ++i) {
    free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (!free) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::close(fd);
  return free;
}

// Copies a client state (and its WAL) as another laptop would hold it.
void CopyState(const std::string& from, const std::string& to) {
  namespace fsys = std::filesystem;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::error_code ec;
    if (fsys::exists(from + suffix)) {
      fsys::copy_file(from + suffix, to + suffix, fsys::copy_options::overwrite_existing, ec);
      ASSERT_FALSE(ec) << ec.message();
    }
  }
}

TEST(FsLeaseTest, SecondMountOfTheSameFilesystemIsRefusedNamingTheHolder) {
  auto fs = MountedFs::Create();
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  ASSERT_EQ(WriteAndSync(fs->Path("kept"), PatternBytes(10000, 1)), 0);

  // The same state file from a second process on this machine: the local lock.
  const std::string mnt2 = fs->Scratch("mnt2");
  ASSERT_EQ(::mkdir(mnt2.c_str(), 0755), 0);
  CmdResult same = MountInBackground(*fs, fs->state(), mnt2, "");
  EXPECT_NE(same.exit_code, 0);
  EXPECT_NE(same.output.find("in use by another process on this machine"), std::string::npos)
      << same.output;
  EXPECT_FALSE(FindMount(mnt2));

  // A copy of the state (another laptop): the servers' lease names the holder.
  const std::string copy = fs->Scratch("copy.s3oram");
  ASSERT_NO_FATAL_FAILURE(CopyState(fs->state(), copy));
  CmdResult other = MountInBackground(*fs, copy, mnt2, "");
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.output.find("in use by"), std::string::npos) << other.output;
  EXPECT_NE(other.output.find("pid " + std::to_string(fs->pid())), std::string::npos)
      << other.output;
  EXPECT_NE(other.output.find("mounted on " + fs->root()), std::string::npos) << other.output;
  EXPECT_NE(other.output.find("--force"), std::string::npos) << other.output;
  EXPECT_FALSE(FindMount(mnt2));

  // The holder was not disturbed.
  EXPECT_TRUE(FileHasContent(fs->Path("kept"), PatternBytes(10000, 1)));
  ASSERT_EQ(WriteAndSync(fs->Path("after"), PatternBytes(5000, 2)), 0);
  ASSERT_TRUE(fs->Remount());
  EXPECT_TRUE(FileHasContent(fs->Path("after"), PatternBytes(5000, 2)));
}

TEST(FsLeaseTest, CrashedMountOnThisMachineIsTakenOverWithoutForce) {
  auto fs = MountedFs::Create();
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  ASSERT_EQ(WriteAndSync(fs->Path("f"), PatternBytes(20000, 3)), 0);
  ASSERT_TRUE(fs->Kill9());
  ASSERT_TRUE(fs->Mount());
  EXPECT_TRUE(FileHasContent(fs->Path("f"), PatternBytes(20000, 3)));
  EXPECT_NE(fs->daemon_log().find("taking over the lease of a crashed client"), std::string::npos);
}

TEST(FsLeaseTest, ForceTakesTheFilesystemOverAndTheOldMountIsFenced) {
  auto fs = MountedFs::Create();
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  ASSERT_EQ(WriteAndSync(fs->Path("before"), PatternBytes(30000, 4)), 0);
  // Laptop B gets a copy of the state while A is unmounted; A mounts again
  // and then goes silent (it is holding the lease, but B's owner decides it is
  // gone and forces a takeover).
  ASSERT_TRUE(fs->Unmount());
  const std::string copy = fs->Scratch("b.s3oram");
  ASSERT_NO_FATAL_FAILURE(CopyState(fs->state(), copy));
  ASSERT_TRUE(fs->Mount());

  const std::string mnt_b = fs->Scratch("mnt-b");
  ASSERT_EQ(::mkdir(mnt_b.c_str(), 0755), 0);
  CmdResult refused = MountInBackground(*fs, copy, mnt_b, "");
  ASSERT_NE(refused.exit_code, 0) << refused.output;
  CmdResult forced = MountInBackground(*fs, copy, mnt_b, "force");
  ASSERT_EQ(forced.exit_code, 0) << forced.output;
  ASSERT_TRUE(FindMount(mnt_b));

  // A is fenced: its ORAM accesses are refused, so its write cannot be made
  // durable, and B never sees it.
  EXPECT_EQ(WriteAndSync(fs->Path("from-a"), PatternBytes(8192, 5)), EIO);
  EXPECT_NE(fs->daemon_log().find("fenced off"), std::string::npos) << Tail(fs->daemon_log(), 3000);
  // B reads what A had made durable before, and writes on.
  EXPECT_TRUE(FileHasContent(mnt_b + "/before", PatternBytes(30000, 4)));
  ASSERT_EQ(WriteAndSync(mnt_b + "/from-b", PatternBytes(12000, 6)), 0);
  CmdResult ub = RunCmd({"fusermount3", "-u", mnt_b}, std::chrono::seconds(60));
  ASSERT_EQ(ub.exit_code, 0) << ub.output;
  ASSERT_TRUE(WaitForStateUnlocked(copy));

  // A's unmount cannot write back its dirty block (it is fenced); its state
  // is now stale and it refuses to mount rather than overwrite B's data.
  (void)fs->SignalAndWait(SIGTERM);
  EXPECT_FALSE(fs->Mount());
  EXPECT_NE(fs->log().find("state is stale"), std::string::npos) << Tail(fs->log(), 2000);

  // B's state mounts again and holds everything B wrote.
  CmdResult again = MountInBackground(*fs, copy, mnt_b, "");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(FileHasContent(mnt_b + "/before", PatternBytes(30000, 4)));
  EXPECT_TRUE(FileHasContent(mnt_b + "/from-b", PatternBytes(12000, 6)));
  EXPECT_FALSE(std::filesystem::exists(mnt_b + "/from-a") &&
               ReadFile(mnt_b + "/from-a").value_or("") == PatternBytes(8192, 5));
  CmdResult ub2 = RunCmd({"fusermount3", "-u", mnt_b}, std::chrono::seconds(60));
  EXPECT_EQ(ub2.exit_code, 0) << ub2.output;
  EXPECT_TRUE(WaitForStateUnlocked(copy));  // the daemon has exited
}

// A server that stops answering (SIGSTOP) makes the mount's requests fail
// with EIO once the configured timeout passes, never hang; after SIGCONT the
// same operations succeed and nothing fsynced is lost.
TEST(FsHangTest, StoppedServerGivesEioAfterTheTimeoutAndRecoversAfterSigcont) {
  constexpr int kTimeoutSeconds = 3, kEvictTimeoutSeconds = 6;
  FsOptions options;
  options.mount_opts = "timeout=" + std::to_string(kTimeoutSeconds) +
                       ",evict_timeout=" + std::to_string(kEvictTimeoutSeconds);
  auto fs = MountedFs::Create(options);
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  ASSERT_EQ(WriteAndSync(fs->Path("before"), PatternBytes(40000, 7)), 0);

  auto& cluster = *fs->test_fs()->cluster;
  ASSERT_TRUE(cluster.Kill(1, SIGSTOP).ok());
  // The configured limits bound the failure: fsync's write-back stops at its
  // first failed access (a retrieval, timeout; or an eviction it had to run
  // first, evict_timeout), and close's flush tries once more.
  const auto t0 = Clock::now();
  const int err = WriteAndSync(fs->Path("during"), PatternBytes(9000, 8));
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(err, EIO);
  // What bounds the wait, counted rather than timed (a loaded machine makes
  // every step slower): fsync's write-back stops at its first failed ORAM
  // access and close's flush tries once more, so at most two accesses wait
  // out the timeout (it used to be one per dirty block). Lease renewals that
  // time out meanwhile are not ORAM accesses and are not counted.
  std::size_t failed_accesses = 0;
  {
    std::istringstream lines(fs->daemon_log());
    for (std::string line; std::getline(lines, line);) {
      if (line.find("ORAM ") != std::string::npos &&
          line.find("did not answer") != std::string::npos) {
        ++failed_accesses;
      }
    }
  }
  EXPECT_GE(failed_accesses, 1u) << Tail(fs->daemon_log(), 3000);
  EXPECT_LE(failed_accesses, 2u) << Tail(fs->daemon_log(), 3000);
  std::printf("[ hang     ] write+fsync against a stopped server failed with EIO after %.1f s "
              "(timeout %d s, evict_timeout %d s), %zu ORAM access(es) timed out\n",
              waited, kTimeoutSeconds, kEvictTimeoutSeconds, failed_accesses);
  EXPECT_NE(fs->daemon_log().find("did not answer"), std::string::npos)
      << Tail(fs->daemon_log(), 3000);

  ASSERT_TRUE(cluster.Kill(1, SIGCONT).ok());
  // The same file again: the failed write-back is retried and succeeds.
  ASSERT_EQ(WriteAndSync(fs->Path("during"), PatternBytes(9000, 8)), 0);
  ASSERT_EQ(WriteAndSync(fs->Path("after"), PatternBytes(3000, 9)), 0);
  ASSERT_TRUE(fs->Remount());
  EXPECT_TRUE(FileHasContent(fs->Path("before"), PatternBytes(40000, 7)));
  EXPECT_TRUE(FileHasContent(fs->Path("during"), PatternBytes(9000, 8)));
  EXPECT_TRUE(FileHasContent(fs->Path("after"), PatternBytes(3000, 9)));
}

std::size_t Occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Failure detection with three servers (issue 44): the request timeout is two
// minutes, yet a write+fsync against a stopped server fails with EIO within
// seconds, because a liveness check finds the server down; the daemon logs
// that once, naming the server, and the requests that follow fail at once
// (their failure names the server as down). After SIGCONT the mount goes on
// by itself (no remount), logs once that the server answers again, and
// nothing fsynced is lost.
TEST(FsHangTest, AStoppedServerIsFoundDownOnceAndTheMountGoesOnWhenItReturns) {
  FsOptions options;
  options.mount_opts = "timeout=120,evict_timeout=600";
  auto fs = MountedFs::Create(options);
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  ASSERT_EQ(WriteAndSync(fs->Path("before"), PatternBytes(40000, 7)), 0);

  auto& cluster = *fs->test_fs()->cluster;
  const std::string server1 = "server 1 (" + cluster.endpoints()[1] + ")";
  ASSERT_TRUE(cluster.Kill(1, SIGSTOP).ok());
  struct Resume {
    cluster::LocalCluster& c;
    ~Resume() { (void)c.Kill(1, SIGCONT); }
  } resume{cluster};
  const auto t0 = Clock::now();
  EXPECT_EQ(WriteAndSync(fs->Path("during"), PatternBytes(9000, 8)), EIO);
  const double first = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto t1 = Clock::now();
  EXPECT_EQ(WriteAndSync(fs->Path("also"), PatternBytes(5000, 3)), EIO);
  const double second = std::chrono::duration<double>(Clock::now() - t1).count();
  std::printf(
      "[ down     ] write+fsync with server 1 stopped: EIO after %.1f s, then %.1f s "
      "(request timeout 120 s)\n",
      first, second);
  std::string log = fs->daemon_log();
  EXPECT_EQ(Occurrences(log, server1 + " is down, since "), 1u) << Tail(log, 3000);
  EXPECT_NE(log.find("down: " + server1 + " is down since "), std::string::npos) << Tail(log, 3000);
  EXPECT_EQ(log.find("did not answer within 120000 ms"), std::string::npos) << Tail(log, 3000);
  // `s3oram status`, answered by the mount, shows its verdict beside the
  // others, which it shows in full.
  const CliRun st = RunCli("status -s " + fs->state() + " --timeout-ms 5000");
  EXPECT_EQ(st.exit_code, 1) << st.output;
  EXPECT_NE(st.output.find(cluster.endpoints()[1] + "  the client counts it down since "),
            std::string::npos)
      << st.output;
  EXPECT_EQ(Occurrences(st.output, "  up, answered in"), 2u) << st.output;

  ASSERT_TRUE(cluster.Kill(1, SIGCONT).ok());
  int again = EIO;
  for (int tries = 0; tries < 120 && again != 0; ++tries) {
    again = WriteAndSync(fs->Path("during"), PatternBytes(9000, 8));
    if (again != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_EQ(again, 0) << Tail(fs->daemon_log(), 3000);
  ASSERT_EQ(WriteAndSync(fs->Path("also"), PatternBytes(5000, 3)), 0);
  log = fs->daemon_log();
  EXPECT_EQ(Occurrences(log, server1 + " is down, since "), 1u) << Tail(log, 3000);
  EXPECT_EQ(Occurrences(log, server1 + " answers again"), 1u) << Tail(log, 3000);
  ASSERT_TRUE(fs->Remount());
  EXPECT_TRUE(FileHasContent(fs->Path("before"), PatternBytes(40000, 7)));
  EXPECT_TRUE(FileHasContent(fs->Path("during"), PatternBytes(9000, 8)));
  EXPECT_TRUE(FileHasContent(fs->Path("also"), PatternBytes(5000, 3)));
}

// A server whose disk fills up: writes fail with ENOSPC (not a hang, not a
// crash), nothing stored before is damaged, and once space is freed the
// same writes succeed. The server's data directory is moved onto a small
// ext4 filesystem (a loop-mounted image) that a ballast file fills up to
// 256 KiB of what the server holds: a real full disk (needs root and a loop
// device). Not tmpfs: there a read of a never-written bucket through the
// server's mapping allocates memory, and on a full tmpfs that read faults.
TEST(FsDiskFullTest, FullServerDiskGivesEnospcAndRecoversWhenSpaceIsFreed) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a loop-device filesystem needs root";
  FsOptions options;
  options.mount_opts = "timeout=10,evict_timeout=20";
  auto fs = MountedFs::Create(options);
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  auto& cluster = *fs->test_fs()->cluster;
  std::map<std::string, std::string> stored;
  for (int i = 0; i < 4; ++i) {
    const std::string name = "before-" + std::to_string(i);
    stored[name] = PatternBytes(20000 + 3000 * i, 100 + i);
    ASSERT_EQ(WriteAndSync(fs->Path(name), stored[name]), 0);
  }
  ASSERT_TRUE(fs->Unmount());

  // Server 1's data onto the small disk: data-1 becomes a link to a
  // directory on it, and the ballast sits beside that directory.
  const std::string data = cluster.dir() + "/data-1";
  const std::string orig = data + ".orig";
  const std::string image = data + ".img";
  const std::string disk = data + ".disk";
  ASSERT_TRUE(cluster.Kill(1, SIGTERM).ok());
  ASSERT_EQ(::rename(data.c_str(), orig.c_str()), 0) << std::strerror(errno);
  CmdResult mkimg = RunCmd({"truncate", "-s", "256M", image});
  ASSERT_EQ(mkimg.exit_code, 0) << mkimg.output;
  CmdResult mkfs = RunCmd({"mkfs.ext4", "-q", "-F", "-m", "0", image});
  ASSERT_EQ(mkfs.exit_code, 0) << mkfs.output;
  ASSERT_EQ(::mkdir(disk.c_str(), 0700), 0);
  CmdResult mnt = RunCmd({"mount", "-o", "loop", image, disk});
  if (mnt.exit_code != 0) GTEST_SKIP() << "no loop device to mount a small disk on: " << mnt.output;
  struct Unmounter {
    std::string path;
    ~Unmounter() { RunCmd({"umount", "-l", path}); }
  } unmounter{disk};
  ASSERT_EQ(::mkdir((disk + "/data").c_str(), 0700), 0);
  CmdResult cp = RunCmd({"cp", "-a", "--sparse=always", orig + "/.", disk + "/data/"});
  ASSERT_EQ(cp.exit_code, 0) << cp.output;
  ASSERT_EQ(::symlink((disk + "/data").c_str(), data.c_str()), 0) << std::strerror(errno);
  RunCmd({"sync", "-f", disk});
  struct statvfs vfs{};
  ASSERT_EQ(::statvfs(disk.c_str(), &vfs), 0) << std::strerror(errno);
  const std::uint64_t avail = std::uint64_t{vfs.f_bavail} * vfs.f_frsize;
  ASSERT_GT(avail, 1u << 20);
  const std::string ballast = disk + "/ballast";
  CmdResult fill = RunCmd({"fallocate", "-l", std::to_string(avail - (256u << 10)), ballast});
  ASSERT_EQ(fill.exit_code, 0) << fill.output;
  {
    const Status restarted = cluster.Restart(1);
    ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  }
  ASSERT_TRUE(fs->Mount());

  // Fill it: new files until a write or fsync fails.
  int err = 0;
  std::string failed_name, failed_content;
  for (int i = 0; i < 400 && err == 0; ++i) {
    const std::string name = "fill-" + std::to_string(i);
    const std::string content = PatternBytes(64 * 1024, 200 + i);
    err = WriteAndSync(fs->Path(name), content);
    if (err == 0) {
      stored[name] = content;
    } else {
      failed_name = name;
      failed_content = content;
    }
  }
  ASSERT_NE(err, 0) << "the disk never filled up";
  EXPECT_EQ(err, ENOSPC) << std::strerror(err);
  EXPECT_FALSE(cluster.Exited(1)) << "the server with the full disk died:\n"
                                  << Tail(testing::ReadWholeFile(cluster.dir() + "/server-1.log"), 3000);
  EXPECT_NE(fs->daemon_log().find("No space left on device"), std::string::npos)
      << Tail(fs->daemon_log(), 3000);

  // Space freed: the same write succeeds, and everything reads back.
  ASSERT_EQ(::unlink(ballast.c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(WriteAndSync(fs->Path(failed_name), failed_content), 0);
  stored[failed_name] = failed_content;
  ASSERT_TRUE(fs->Remount());
  for (const auto& [name, content] : stored) {
    EXPECT_TRUE(FileHasContent(fs->Path(name), content)) << name;
  }
  ASSERT_TRUE(fs->Unmount());
  ASSERT_TRUE(cluster.Kill(1, SIGTERM).ok());
}

}  // namespace
}  // namespace s3oram::testing

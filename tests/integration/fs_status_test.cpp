// `s3oram status` of a mounted filesystem asks the mount over its control
// socket (fused/control_socket.h), as a user would run it: without the
// passphrase; with one server stopped (named UNREACHABLE, the others shown);
// while the mount's own access waits on stopped servers (answered from the
// snapshot of its latest call, not after that access: the answer itself
// says a call is under way, so the test knows it asked at that moment); after the daemon was
// killed (the socket it left reads as no mount: status opens the state
// itself); and not once the filesystem is unmounted (the socket is gone).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tests/integration/fs_fixture.h"
#include "tests/integration/run_cli.h"

namespace s3oram::testing {
namespace {

bool IsSocket(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

std::size_t Count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// status -s STATE with no passphrase anywhere (no --passfile, stdin not a
// terminal, S3ORAM_PASSPHRASE cleared for the command).
CliRun StatusWithoutPassphrase(const MountedFs& fs, const std::string& rest = "") {
  return RunCli("status -s " + fs.state() + " " + rest);
}

TEST(FsStatusTest, TheMountAnswersStatusWithoutThePassphraseEvenWhileItsAccessWaits) {
  ASSERT_EQ(::unsetenv("S3ORAM_PASSPHRASE"), 0);  // this test process (and its CLI runs) only
  FsOptions options;
  options.mount_opts = "timeout=120";  // the access held below outlasts the status by far
  auto fs = MountedFs::Create(options);
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  ASSERT_EQ(WriteAndSync(fs->Path("a"), PatternBytes(50000, 1)), 0);
  const std::string socket = fs->state() + ".ctl";
  const std::string mount_line = "mount       " + fs->root();

  // Every server up: the whole status, no passphrase asked.
  CliRun st = StatusWithoutPassphrase(*fs);
  std::printf("[ status   ] of the mount, every server up:\n%s", st.output.c_str());
  EXPECT_EQ(st.exit_code, 0) << st.output;
  EXPECT_NE(st.output.find(mount_line), std::string::npos) << st.output;
  EXPECT_NE(st.output.find("pid " + std::to_string(fs->pid())), std::string::npos) << st.output;
  EXPECT_NE(st.output.find("blocks      "), std::string::npos) << st.output;
  EXPECT_EQ(Count(st.output, "  up, answered in"), 3u) << st.output;
  EXPECT_EQ(Count(st.output, "held by epoch"), 3u) << st.output;
  EXPECT_EQ(st.output.find("sealed"), std::string::npos) << st.output;
  struct stat sst {};
  ASSERT_EQ(::lstat(socket.c_str(), &sst), 0);
  EXPECT_TRUE(S_ISSOCK(sst.st_mode));
  EXPECT_EQ(sst.st_mode & 0777, 0600u);

  // --direct: the state itself, which without a passphrase shows its clear
  // header only.
  CliRun direct = StatusWithoutPassphrase(*fs, "--direct");
  EXPECT_EQ(direct.exit_code, 0) << direct.output;
  EXPECT_EQ(direct.output.find(mount_line), std::string::npos) << direct.output;
  EXPECT_NE(direct.output.find("sealed"), std::string::npos) << direct.output;

  auto& cluster = *fs->test_fs()->cluster;
  // One server stopped: named, the others shown in full, exit 1.
  ASSERT_TRUE(cluster.Kill(1, SIGSTOP).ok());
  CliRun one_down = StatusWithoutPassphrase(*fs, "--timeout-ms 5000");
  ASSERT_TRUE(cluster.Kill(1, SIGCONT).ok());
  EXPECT_EQ(one_down.exit_code, 1) << one_down.output;
  EXPECT_NE(one_down.output.find(mount_line), std::string::npos) << one_down.output;
  EXPECT_NE(one_down.output.find("server 1"), std::string::npos) << one_down.output;
  EXPECT_EQ(Count(one_down.output, "UNREACHABLE"), 1u) << one_down.output;
  EXPECT_EQ(Count(one_down.output, "  up, answered in"), 2u) << one_down.output;

  // Every server busy while the mount writes a file back: each holds every
  // ordered request at a fault hold ("server.serve?file", restarted so)
  // and answers only the quick reads, as a server reading cold buckets
  // from a loaded disk would for seconds. The access holds the ORAM until
  // the hold ends, and status is answered beside it (every server up, the
  // client's state as of its latest call). Asked until the answer says the
  // call is under way (bounded: the access waits 120 s for the servers, the
  // loop at most about 30 s). (Stopped servers would not do: a server that
  // does not answer a liveness check is down, and the access fails within
  // seconds.)
  const std::string hold = fs->test_fs()->dir.Sub("hold");
  { std::ofstream(hold) << "held\n"; }
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(cluster.Kill(i, SIGTERM).ok());
    ASSERT_TRUE(cluster.Restart(i, {"S3ORAM_FAULT=server.serve?" + hold}).ok());
  }
  int written = -1;
  std::thread writer([&] { written = WriteAndSync(fs->Path("b"), PatternBytes(70000, 2)); });
  CliRun all_busy;
  for (int attempt = 0; attempt < 20; ++attempt) {
    all_busy = StatusWithoutPassphrase(*fs, "--timeout-ms 1000");
    if (all_busy.output.find("a call under way") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  std::filesystem::remove(hold);
  writer.join();
  std::printf("[ status   ] of the mount while its write-back waits on busy servers:\n%s",
              all_busy.output.c_str());
  EXPECT_EQ(written, 0) << "the write-back did not finish once the servers went on";
  EXPECT_NE(all_busy.output.find(mount_line), std::string::npos)
      << "status was not answered by the mount while its access waited:\n"
      << all_busy.output;
  EXPECT_NE(all_busy.output.find("a call under way"), std::string::npos)
      << "no answer was given while the write-back held the ORAM:\n"
      << all_busy.output;
  EXPECT_EQ(Count(all_busy.output, "UNREACHABLE"), 0u) << all_busy.output;
  EXPECT_EQ(Count(all_busy.output, "  up, answered in"), 3u) << all_busy.output;
  EXPECT_NE(all_busy.output.find("blocks      "), std::string::npos) << all_busy.output;
  // The servers as they were, for what follows.
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(cluster.Kill(i, SIGTERM).ok());
    ASSERT_TRUE(cluster.Restart(i).ok());
  }

  // Killed: the socket stays behind and reads as no mount; status opens the
  // state itself (with the passphrase), saying nothing of a failed ask.
  ASSERT_TRUE(fs->Kill9());
  EXPECT_TRUE(IsSocket(socket));
  CliRun after_kill = RunCli(CliArgs(*fs, "status"));
  EXPECT_EQ(after_kill.exit_code, 0) << after_kill.output;
  EXPECT_EQ(after_kill.output.find(mount_line), std::string::npos) << after_kill.output;
  EXPECT_EQ(after_kill.output.find("asking the mount failed"), std::string::npos)
      << after_kill.output;
  EXPECT_EQ(Count(after_kill.output, "  up, answered in"), 3u) << after_kill.output;

  // Mounted again: the new daemon replaces the socket and answers.
  ASSERT_TRUE(fs->Mount());
  CliRun again = StatusWithoutPassphrase(*fs);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("pid " + std::to_string(fs->pid())), std::string::npos)
      << again.output;
  EXPECT_TRUE(FileHasContent(fs->Path("b"), PatternBytes(70000, 2)));

  // Unmounted: no socket, and status without a passphrase shows the header.
  ASSERT_TRUE(fs->Unmount());
  EXPECT_FALSE(IsSocket(socket));
  CliRun unmounted = StatusWithoutPassphrase(*fs);
  EXPECT_EQ(unmounted.exit_code, 0) << unmounted.output;
  EXPECT_NE(unmounted.output.find("sealed"), std::string::npos) << unmounted.output;
}

}  // namespace
}  // namespace s3oram::testing

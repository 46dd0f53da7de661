// Third-party tools over an s3oramfs mount: fio with checksummed verify,
// stress-ng filesystem stressors, a git workload and tar round trips of a
// generated tree. With S3ORAM_FS_TEST_DIR they run against a reference
// filesystem instead (remounts are then no-ops).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/fs_fixture.h"
#include "tests/support/test_scale.h"

namespace s3oram {
namespace {

using testing::CmdResult;
using testing::FsOptions;
using testing::MountedFs;
using testing::PatternBytes;
using testing::RunCmd;
using testing::Tail;
namespace sfs = std::filesystem;

bool HaveTool(const std::string& name) {
  return RunCmd({"sh", "-c", "command -v " + name}, std::chrono::seconds(10)).exit_code == 0;
}

#define REQUIRE_TOOL(name) \
  if (HaveTool(name)) {    \
  } else                   \
    GTEST_SKIP() << name << " is not installed"

// --- fio ---------------------------------------------------------------------

struct FioCase {
  const char* name;
  const char* rw;
  const char* bs;
  const char* size;  // per job
};

void PrintTo(const FioCase& c, std::ostream* os) { *os << c.name; }

class FsFioTest : public ::testing::TestWithParam<FioCase> {};

TEST_P(FsFioTest, VerifiesWhatItWrote) {
  REQUIRE_TOOL("fio");
  auto fs = MountedFs::Create();
  ASSERT_TRUE(fs);
  const FioCase& c = GetParam();
  const std::string dir = fs->Path("fio");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string json = fs->Scratch(std::string("fio-") + c.name + ".json");
  auto run = [&](const std::string& tag) {
    return RunCmd({"fio", std::string("--name=") + c.name, "--directory=" + dir,
                   std::string("--rw=") + c.rw, std::string("--bs=") + c.bs,
                   std::string("--size=") + c.size, "--numjobs=2", "--ioengine=psync",
                   "--verify=crc32c", "--verify_fatal=1", "--do_verify=1", "--end_fsync=1",
                   "--randrepeat=0", "--output-format=json", "--output=" + json + tag},
                  std::chrono::seconds(600));
  };
  CmdResult r = run("");
  std::string out = testing::ReadWholeFile(json);
  ASSERT_EQ(r.exit_code, 0) << r.output << "\n" << Tail(out, 4000);
  // Every job reports error 0 and read (verified) what it wrote.
  std::regex err_re(R"re("error"\s*:\s*(\d+))re");
  int jobs = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), err_re); it != std::sregex_iterator(); ++it) {
    ++jobs;
    EXPECT_EQ((*it)[1].str(), "0") << Tail(out, 4000);
  }
  EXPECT_EQ(jobs, 2) << "expected two jobs in the JSON output:\n" << Tail(out, 4000);
  std::regex read_re(R"re("read"\s*:\s*\{\s*"io_bytes"\s*:\s*(\d+))re");
  int reads = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), read_re); it != std::sregex_iterator(); ++it) {
    ++reads;
    EXPECT_GT(std::stoll((*it)[1].str()), 0) << "no verify reads";
  }
  EXPECT_EQ(reads, 2);
  // The files are still right after a remount: verify only.
  ASSERT_TRUE(fs->Remount());
  CmdResult v = RunCmd({"fio", std::string("--name=") + c.name, "--directory=" + dir,
                        std::string("--rw=") + c.rw, std::string("--bs=") + c.bs,
                        std::string("--size=") + c.size, "--numjobs=2", "--ioengine=psync",
                        "--verify=crc32c", "--verify_fatal=1", "--verify_only=1",
                        "--randrepeat=0", "--output-format=json", "--output=" + json + ".2"},
                       std::chrono::seconds(600));
  EXPECT_EQ(v.exit_code, 0) << v.output << Tail(testing::ReadWholeFile(json + ".2"), 4000);
}

INSTANTIATE_TEST_SUITE_P(Fio, FsFioTest,
                         ::testing::Values(FioCase{"seq", "write", "64k", "1m"},
                                           FioCase{"rand", "randwrite", "4k", "512k"},
                                           FioCase{"seqsmall", "write", "1000", "300k"}),
                         [](const auto& p) { return std::string(p.param.name); });

// --- stress-ng -----------------------------------------------------------------

struct StressCase {
  const char* name;
  std::vector<std::string> args;
};

void PrintTo(const StressCase& c, std::ostream* os) { *os << c.name; }

class FsStressTest : public ::testing::TestWithParam<StressCase> {};

TEST_P(FsStressTest, StressorPasses) {
  REQUIRE_TOOL("stress-ng");
  auto fs = MountedFs::Create();
  ASSERT_TRUE(fs);
  const StressCase& c = GetParam();
  const std::string dir = fs->Path("stress");
  ASSERT_EQ(::mkdir(dir.c_str(), 0777), 0);
  std::vector<std::string> argv = {"stress-ng", "--" + std::string(c.name), "1"};
  argv.insert(argv.end(), c.args.begin(), c.args.end());
  for (std::string a : {std::string("--temp-path"), dir, std::string("--timeout"), std::string("20s"),
                        std::string("--metrics-brief")}) {
    argv.push_back(a);
  }
  CmdResult r = RunCmd(argv, std::chrono::seconds(300), fs->Scratch(""));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("successful run completed"), std::string::npos) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  bool ops_seen = false;
  std::regex ops_re("metrc: \\[\\d+\\] " + std::string(c.name) + "\\s+(\\d+)\\s");
  while (std::getline(lines, line)) {
    std::string lower = line;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
    EXPECT_EQ(lower.find("fail"), std::string::npos) << line;
    std::smatch m;
    if (std::regex_search(line, m, ops_re)) {
      ops_seen = true;
      EXPECT_GT(std::stoll(m[1].str()), 0) << line;
    }
  }
  EXPECT_TRUE(ops_seen) << "no bogo-ops metric for " << c.name << ":\n" << r.output;
  // stress-ng removes its files; the filesystem must still unmount cleanly.
  EXPECT_TRUE(testing::ListDir(dir).empty());
  ASSERT_TRUE(fs->Remount());
}

INSTANTIATE_TEST_SUITE_P(
    StressNg, FsStressTest,
    ::testing::Values(StressCase{"dir", {"--dir-ops", "300", "--dir-dirs", "256"}},
                      StressCase{"dentry", {"--dentry-ops", "20", "--dentries", "256"}},
                      StressCase{"link", {"--link-ops", "10"}},
                      StressCase{"symlink", {"--symlink-ops", "10"}},
                      StressCase{"rename", {"--rename-ops", "2000"}},
                      StressCase{"hdd", {"--hdd-ops", "300", "--hdd-bytes", "1M", "--verify"}},
                      StressCase{"seek", {"--seek-ops", "2000", "--seek-size", "1M"}},
                      StressCase{"fallocate", {"--fallocate-ops", "20", "--fallocate-bytes", "1M"}},
                      StressCase{"chmod", {"--chmod-ops", "500"}},
                      StressCase{"xattr", {"--xattr-ops", "20"}}),
    [](const auto& p) { return std::string(p.param.name); });

// --- git -----------------------------------------------------------------------

TEST(FsToolsTest, GitWorkload) {
  REQUIRE_TOOL("git");
  auto fs = MountedFs::Create();
  ASSERT_TRUE(fs);
  const std::string repo = fs->Path("repo");
  ASSERT_EQ(::mkdir(repo.c_str(), 0755), 0);
  const std::vector<std::string> env = {"HOME=" + fs->Scratch(""), "GIT_CONFIG_NOSYSTEM=1",
                                        "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
                                        "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com"};
  auto git = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "git");
    CmdResult r = RunCmd(args, std::chrono::seconds(300), repo, env);
    EXPECT_EQ(r.exit_code, 0) << "git " << args[1] << ": " << r.output;
    return r;
  };
  git({"init", "-q", "-b", "main"});
  std::mt19937_64 g(1);
  for (int i = 0; i < 150; ++i) {
    std::string dir = repo + "/src" + std::to_string(i % 10);
    ::mkdir(dir.c_str(), 0755);
    std::string text;
    for (int l = 0; l < 20 + i % 50; ++l) text += "line " + std::to_string(g() % 100000) + "\n";
    ASSERT_TRUE(testing::WriteFile(dir + "/file" + std::to_string(i) + ".txt", text));
  }
  ASSERT_TRUE(testing::WriteFile(repo + "/blob.bin", PatternBytes(100000, 3)));
  git({"add", "-A"});
  git({"commit", "-q", "-m", "first"});
  for (int i = 0; i < 150; i += 7) {
    ASSERT_TRUE(testing::WriteFile(repo + "/src" + std::to_string(i % 10) + "/file" + std::to_string(i) + ".txt",
                                   "changed " + std::to_string(i) + "\n"));
  }
  ASSERT_EQ(::unlink((repo + "/src3/file3.txt").c_str()), 0);
  ASSERT_TRUE(testing::WriteFile(repo + "/new.txt", "new\n"));
  git({"add", "-A"});
  git({"commit", "-q", "-m", "second"});
  git({"gc", "-q"});
  std::string oneline = git({"log", "--oneline"}).output;
  EXPECT_EQ(std::count(oneline.begin(), oneline.end(), '\n'), 2) << oneline;
  git({"fsck", "--full", "--strict"});
  EXPECT_EQ(git({"status", "--porcelain"}).output, "");
  ASSERT_TRUE(fs->Remount());
  git({"fsck", "--full", "--strict"});
  EXPECT_EQ(git({"status", "--porcelain"}).output, "");
  CmdResult log = git({"log", "--format=%s"});
  EXPECT_EQ(log.output, "second\nfirst\n");
  // Check out the first commit and back: the working tree follows.
  git({"checkout", "-q", "HEAD~1"});
  EXPECT_TRUE(testing::ReadFile(repo + "/src3/file3.txt").has_value());
  EXPECT_FALSE(testing::ReadFile(repo + "/new.txt").has_value());
  git({"checkout", "-q", "main"});
  EXPECT_TRUE(testing::FileHasContent(repo + "/new.txt", "new\n"));
  EXPECT_EQ(git({"status", "--porcelain"}).output, "");
  git({"fsck", "--full", "--strict"});
}

// --- tar -----------------------------------------------------------------------

struct Node {
  char type;  // f, d, l
  unsigned mode;
  std::string data;  // content or link target
  std::int64_t mtime;
  bool operator==(const Node&) const = default;
};

std::map<std::string, Node> Snapshot(const std::string& root) {
  std::map<std::string, Node> out;
  std::error_code ec;
  for (auto it = sfs::recursive_directory_iterator(root, ec); it != sfs::recursive_directory_iterator();
       it.increment(ec)) {
    std::string p = it->path().string();
    struct stat st{};
    if (::lstat(p.c_str(), &st) != 0) {
      ADD_FAILURE() << "lstat " << p << ": " << std::strerror(errno);
      continue;
    }
    Node n{'?', st.st_mode & 07777u, "", st.st_mtim.tv_sec};
    if (S_ISREG(st.st_mode)) {
      n.type = 'f';
      auto d = testing::ReadFile(p);
      if (!d) ADD_FAILURE() << "read " << p << ": " << std::strerror(errno);
      n.data = d.value_or("<unreadable>");
    } else if (S_ISDIR(st.st_mode)) {
      n.type = 'd';
      n.mtime = 0;  // directories' mtimes move as entries are added
    } else if (S_ISLNK(st.st_mode)) {
      n.type = 'l';
      n.mode = 0;
      n.data = sfs::read_symlink(p, ec).string();
    }
    out[p.substr(root.size())] = n;
  }
  EXPECT_FALSE(ec) << ec.message();
  return out;
}

::testing::AssertionResult SameTree(const std::string& a, const std::string& b) {
  auto sa = Snapshot(a), sb = Snapshot(b);
  std::ostringstream diff;
  int n = 0;
  for (const auto& [p, node] : sa) {
    auto it = sb.find(p);
    if (it == sb.end()) {
      if (n++ < 10) diff << "missing in " << b << ": " << p << "\n";
    } else if (!(it->second == node)) {
      if (n++ < 10) {
        diff << "differs: " << p << " type " << node.type << "/" << it->second.type << " mode " << std::oct
             << node.mode << "/" << it->second.mode << std::dec << " mtime " << node.mtime << "/"
             << it->second.mtime << " " << testing::DiffSummary(it->second.data, node.data) << "\n";
      }
    }
  }
  for (const auto& [p, node] : sb) {
    if (!sa.count(p) && n++ < 10) diff << "extra in " << b << ": " << p << "\n";
  }
  if (n) return ::testing::AssertionFailure() << n << " differences:\n" << diff.str();
  // The tree MakeTree builds (a third of it under the sanitizers).
  const auto at_least = static_cast<std::size_t>(testing::ScaledForBuild(1000, 3, 333));
  if (sa.size() < at_least) {
    return ::testing::AssertionFailure() << "only " << sa.size() << " entries";
  }
  return ::testing::AssertionSuccess();
}

// >= 1,000 regular files (a third of that under the sanitizers; mostly
// small, some large), nested directories, symlinks (relative, absolute,
// dangling, to directories) and hard links.
void MakeTree(const std::string& root) {
  std::mt19937_64 g(42);
  const unsigned modes[] = {0644, 0600, 0755, 0640, 0444};
  std::vector<std::string> dirs = {root};
  for (int d = 0; d < 30; ++d) {
    std::string parent = dirs[g() % dirs.size()];
    std::string dir = parent + "/dir" + std::to_string(d);
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
    dirs.push_back(dir);
  }
  int files = 0;
  // A third of the files under the sanitizers: the same paths, less time.
  const int count = testing::ScaledForBuild(1050, 3, 350);
  for (int i = 0; i < count; ++i) {
    std::string dir = dirs[g() % dirs.size()];
    std::size_t size = i % 60 == 0 ? 40000 + g() % 80000 : g() % 2500;
    std::string path = dir + "/file" + std::to_string(i) + (i % 3 ? ".txt" : ".bin");
    ASSERT_TRUE(testing::WriteFile(path, PatternBytes(size, 1000 + i), 0644));
    ASSERT_EQ(::chmod(path.c_str(), modes[i % 5]), 0);
    timespec ts[2] = {{1600000000 + i, 0}, {1600000000 + i * 1000, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), ts, 0), 0);
    ++files;
    if (i % 35 == 0) {
      ASSERT_EQ(::symlink(("file" + std::to_string(i) + (i % 3 ? ".txt" : ".bin")).c_str(),
                          (dir + "/rel" + std::to_string(i)).c_str()), 0);
      ASSERT_EQ(::symlink(("../missing" + std::to_string(i)).c_str(),
                          (dir + "/dangling" + std::to_string(i)).c_str()), 0);
    }
    if (i % 100 == 1) {
      ASSERT_EQ(::link(path.c_str(), (dir + "/hard" + std::to_string(i)).c_str()), 0);
    }
  }
  ASSERT_EQ(::symlink("dir0", (root + "/todir").c_str()), 0);
  ASSERT_EQ(::symlink("/etc/hostname", (root + "/absolute").c_str()), 0);
  ASSERT_GE(files, testing::ScaledForBuild(1000, 3, 333));
}

TEST(FsToolsTest, TarRoundTripOfAThousandFiles) {
  REQUIRE_TOOL("tar");
  auto fs = MountedFs::Create();
  ASSERT_TRUE(fs);
  const std::string src = fs->Scratch("src");
  ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
  MakeTree(src);
  if (HasFatalFailure()) return;
  const std::string tarball = fs->Scratch("src.tar");
  CmdResult c = RunCmd({"tar", "-C", src, "-cf", tarball, "."});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const std::string tree = fs->Path("tree");
  ASSERT_EQ(::mkdir(tree.c_str(), 0755), 0);
  CmdResult x = RunCmd({"tar", "-C", tree, "-xpf", tarball});
  ASSERT_EQ(x.exit_code, 0) << x.output;
  EXPECT_TRUE(SameTree(src, tree));
  CmdResult d = RunCmd({"tar", "-C", tree, "--compare", "-f", tarball});
  EXPECT_EQ(d.exit_code, 0) << Tail(d.output, 4000);
  ASSERT_TRUE(fs->Remount());
  EXPECT_TRUE(SameTree(src, tree));
  d = RunCmd({"tar", "-C", tree, "--compare", "-f", tarball});
  EXPECT_EQ(d.exit_code, 0) << Tail(d.output, 4000);
  // Hard links came through as links.
  struct stat a{}, b{};
  ASSERT_EQ(::lstat((tree + "/todir").c_str(), &a), 0);
  EXPECT_TRUE(S_ISLNK(a.st_mode));
  for (const auto& e : sfs::recursive_directory_iterator(tree)) {
    std::string name = e.path().filename().string();
    if (name.rfind("hard", 0) != 0) continue;
    std::string i = name.substr(4);
    ASSERT_EQ(::lstat(e.path().c_str(), &a), 0);
    ASSERT_EQ(::lstat((e.path().parent_path() / ("file" + i + (std::stoi(i) % 3 ? ".txt" : ".bin"))).c_str(), &b), 0);
    EXPECT_EQ(a.st_ino, b.st_ino) << name;
    EXPECT_EQ(a.st_nlink, 2u) << name;
  }
  // tar reading from the mount, extracted elsewhere.
  const std::string back_tar = fs->Scratch("back.tar"), back = fs->Scratch("back");
  ASSERT_EQ(::mkdir(back.c_str(), 0755), 0);
  c = RunCmd({"tar", "-C", tree, "-cf", back_tar, "."});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  x = RunCmd({"tar", "-C", back, "-xpf", back_tar});
  ASSERT_EQ(x.exit_code, 0) << x.output;
  EXPECT_TRUE(SameTree(src, back));
  // And removal of the whole tree leaves an empty filesystem.
  CmdResult rm = RunCmd({"rm", "-rf", tree});
  EXPECT_EQ(rm.exit_code, 0) << rm.output;
  EXPECT_TRUE(testing::ListDir(fs->root()).empty());
}

}  // namespace
}  // namespace s3oram

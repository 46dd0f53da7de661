// MountedFs: a real s3oramfs mount for end-to-end filesystem tests.
//
// Daemon mode (default): three s3oram-serverd processes and a fresh filesystem
// in a temporary directory (MakeFs), and s3oramfs-fused started in the
// foreground (-f) on <tmp>/mnt with its stdout/stderr in <tmp>/fused.log.
// Only the daemon PIDs this object started are ever signalled.
//
// Reference mode: with S3ORAM_FS_TEST_DIR=<dir> the tests run in a fresh
// subdirectory of <dir> (e.g. on tmpfs or ext4) and no daemon is started;
// Unmount/Remount are no-ops and daemon-specific tests skip. Every test that
// checks POSIX semantics must pass there too: that validates the tests.
//
// Environment: S3ORAM_FUSED overrides the daemon binary;
// S3ORAM_TEST_FUSED_OPTS adds -o options to every mount (e.g. log_level=debug);
// S3ORAM_TEST_KEEP=1 keeps the temporary directory.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <concepts>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/integration/cluster_fixture.h"

namespace s3oram::testing {

// --- small helpers ------------------------------------------------------------

inline std::string FusedPath() {
  const char* env = std::getenv("S3ORAM_FUSED");
  if (env && *env) return env;
#ifdef S3ORAM_TEST_FUSED
  return S3ORAM_TEST_FUSED;
#else
  return "";
#endif
}

#ifdef S3ORAM_TEST_CLI
// The s3oram CLI under test: $S3ORAM_CLI (an installed one) or the build's.
inline std::string CliPath() {
  const char* env = std::getenv("S3ORAM_CLI");
  return env && *env ? env : S3ORAM_TEST_CLI;
}
#endif

// The reference directory (S3ORAM_FS_TEST_DIR) or empty for daemon mode.
inline std::string ReferenceDir() {
  const char* env = std::getenv("S3ORAM_FS_TEST_DIR");
  return env && *env ? env : "";
}

// 16 MiB of 4 KiB blocks (A = 16, H = 9): 4096 blocks.
inline OramParams DefaultFsParams() { return SmallParams(4096, 16, 9); }
// 32 MiB (8192 blocks), for the heavier workloads.
inline OramParams LargeFsParams() { return SmallParams(4096, 16, 10); }
// 256 KiB (64 blocks): fills up quickly, for ENOSPC.
inline OramParams TinyFsParams() { return SmallParams(4096, 4, 5); }

inline std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

// waitpid with a deadline; true once reaped (*status set).
inline bool WaitPidFor(pid_t pid, std::chrono::milliseconds timeout, int* status) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    pid_t r = ::waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) return false;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

struct MountEntry {
  std::string mount_point;
  std::string fstype;
  std::string source;
  std::string options;  // per-mount options
};

inline std::string UnescapeMountField(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8)));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// The (last, i.e. topmost) entry of /proc/self/mountinfo mounted on `mnt`.
inline std::optional<MountEntry> FindMount(const std::string& mnt) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::optional<MountEntry> found;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> f;
    std::string w;
    while (ls >> w) f.push_back(w);
    if (f.size() < 10) continue;
    std::size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash + 2 >= f.size()) continue;
    if (UnescapeMountField(f[4]) != mnt) continue;
    found = MountEntry{UnescapeMountField(f[4]), f[dash + 1], UnescapeMountField(f[dash + 2]),
                       f[5]};
  }
  return found;
}

inline bool IsS3oramMounted(const std::string& mnt) {
  auto m = FindMount(mnt);
  return m && m->fstype == "fuse.s3oramfs";
}

struct CmdResult {
  int exit_code = -1;  // -1 if it did not exit normally
  bool timed_out = false;
  int wait_status = 0;
  std::string output;  // stdout and stderr, interleaved
};

// Runs argv (PATH lookup) in its own process group with stdout+stderr captured;
// after `timeout` the group gets SIGKILL. `env` entries are "K=V" added to ours.
inline CmdResult RunCmd(const std::vector<std::string>& argv,
                        std::chrono::seconds timeout = std::chrono::seconds(600),
                        const std::string& cwd = "", const std::vector<std::string>& env = {}) {
  CmdResult r;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    r.output = "pipe failed";
    return r;
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    // A session of its own: its own process group, and no controlling
    // terminal, so a passphrase prompt fails at once instead of waiting.
    ::setsid();
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    int nul = ::open("/dev/null", O_RDONLY);
    if (nul >= 0) ::dup2(nul, 0);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    r.output = "fork failed";
    return r;
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool reaped = false;
  char buf[8192];
  auto drain = [&](int wait_ms) {
    while (true) {
      pollfd p{fds[0], POLLIN, 0};
      int n = ::poll(&p, 1, wait_ms);
      if (n <= 0) return;
      ssize_t k = ::read(fds[0], buf, sizeof buf);
      if (k <= 0) return;
      r.output.append(buf, static_cast<std::size_t>(k));
      wait_ms = 0;
    }
  };
  while (!reaped) {
    drain(20);
    pid_t w = ::waitpid(pid, &r.wait_status, WNOHANG);
    if (w == pid) {
      reaped = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &r.wait_status, 0);
      reaped = true;
    }
  }
  // A daemonized grandchild may keep the pipe open: take what is there, no EOF wait.
  drain(50);
  ::close(fds[0]);
  if (!r.timed_out && WIFEXITED(r.wait_status)) r.exit_code = WEXITSTATUS(r.wait_status);
  return r;
}

inline std::string Tail(const std::string& s, std::size_t n) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Deterministic pseudo-random bytes.
inline std::string PatternBytes(std::size_t n, std::uint64_t seed) {
  std::string out(n, '\0');
  std::mt19937_64 g(seed * 0x9e3779b97f4a7c15ull + 12345);
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t v = g();
    for (std::size_t k = 0; k < 8 && i + k < n; ++k) out[i + k] = static_cast<char>(v >> (8 * k));
  }
  return out;
}

// Writes all of `data` at `off` (pwrite loop); false with errno on failure.
inline bool PwriteAll(int fd, std::string_view data, off_t off) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done,
                         off + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

inline bool WriteAllFd(int fd, std::string_view data) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Writes a whole file (created or truncated) and fsyncs it; 0 or the errno
// of the failing call.
inline int WriteAndSync(const std::string& path, std::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = 0;
  if (!WriteAllFd(fd, data)) err = errno ? errno : EIO;
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  ::close(fd);
  return err;
}

// Reads up to n bytes at off (short only at EOF); nullopt with errno on error.
inline std::optional<std::string> PreadUpTo(int fd, std::size_t n, off_t off) {
  std::string out(n, '\0');
  std::size_t done = 0;
  while (done < n) {
    ssize_t k = ::pread(fd, out.data() + done, n - done, off + static_cast<off_t>(done));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return std::nullopt;
    if (k == 0) break;
    done += static_cast<std::size_t>(k);
  }
  out.resize(done);
  return out;
}

// A bool where the mode goes (WriteFile(p, d, /*do_fsync=*/true)) would
// make mode 01 and no fsync: refused at compile time.
template <typename B>
requires std::same_as<B, bool>
auto WriteFile(const std::string& path, std::string_view data, B do_fsync)
    -> ::testing::AssertionResult = delete;

// Creates/truncates `path` with `data`; optionally fsyncs. Reports errno.
inline ::testing::AssertionResult WriteFile(const std::string& path, std::string_view data,
                                            mode_t mode = 0644, bool do_fsync = false) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return ::testing::AssertionFailure() << "open " << path << ": " << std::strerror(errno);
  if (!WriteAllFd(fd, data)) {
    int e = errno;
    ::close(fd);
    return ::testing::AssertionFailure() << "write " << path << ": " << std::strerror(e);
  }
  if (do_fsync && ::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    return ::testing::AssertionFailure() << "fsync " << path << ": " << std::strerror(e);
  }
  if (::close(fd) != 0)
    return ::testing::AssertionFailure() << "close " << path << ": " << std::strerror(errno);
  return ::testing::AssertionSuccess();
}

// The whole file, or nullopt (errno set) if it cannot be opened/read.
inline std::optional<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      errno = e;
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

// A compact description of where two byte strings differ.
inline std::string DiffSummary(std::string_view got, std::string_view want) {
  std::ostringstream ss;
  ss << "size got " << got.size() << " want " << want.size();
  std::size_t n = std::min(got.size(), want.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (got[i] != want[i]) {
      std::size_t bad = 0;
      for (std::size_t j = i; j < n; ++j) bad += got[j] != want[j];
      ss << "; first difference at byte " << i << " (got 0x" << std::hex
         << (static_cast<unsigned>(static_cast<unsigned char>(got[i]))) << " want 0x"
         << (static_cast<unsigned>(static_cast<unsigned char>(want[i]))) << std::dec << "), "
         << bad << " differing bytes";
      break;
    }
  }
  return ss.str();
}

inline ::testing::AssertionResult FileHasContent(const std::string& path, std::string_view want) {
  auto got = ReadFile(path);
  if (!got) return ::testing::AssertionFailure() << "read " << path << ": " << std::strerror(errno);
  if (*got != want) return ::testing::AssertionFailure() << path << ": " << DiffSummary(*got, want);
  return ::testing::AssertionSuccess();
}

inline std::set<std::string> ListDir(const std::string& path) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
    out.insert(e.path().filename().string());
  }
  return out;
}

// errno of a call that is expected to fail (0 if it succeeded).
#define S3ORAM_ERRNO_OF(call) ((call) < 0 ? errno : 0)

// --- the mount ----------------------------------------------------------------

struct FsOptions {
  OramParams params = DefaultFsParams();
  std::string mount_opts;  // extra -o options (comma-separated)
  bool pass_passfile = true;  // add -o passfile=<the test passphrase file>
  bool mount = true;       // false: only create the filesystem and the mount point
  // Adds -o log_file=<tmp>/fused-log.txt (in the foreground without -d the
  // daemon logs to syslog otherwise).
  bool log_to_file = true;
  // How long a server waits for a peer's SMP shares (a killed peer fails
  // the eviction after this).
  std::uint32_t peer_timeout_ms = 20000;
};

class MountedFs {
 public:
  // A fresh filesystem, mounted (or a fresh reference directory). nullptr
  // after recording a test failure.
  static std::unique_ptr<MountedFs> Create(FsOptions options = {}) {
    ::umask(022);
    std::unique_ptr<MountedFs> m(new MountedFs());
    m->options_ = options;
    std::string ref = ReferenceDir();
    if (!ref.empty()) {
      m->reference_ = true;
      std::string tmpl = ref + "/s3oramfs-ref-XXXXXX";
      if (!::mkdtemp(tmpl.data())) {
        ADD_FAILURE() << "mkdtemp in S3ORAM_FS_TEST_DIR=" << ref << ": " << std::strerror(errno);
        return nullptr;
      }
      m->root_ = std::filesystem::canonical(tmpl).string();
      m->scratch_ = std::make_unique<TempDir>();
      return m;
    }
    if (FusedPath().empty()) {
      ADD_FAILURE() << "s3oramfs-fused was not built (set S3ORAM_FUSED or S3ORAM_FS_TEST_DIR)";
      return nullptr;
    }
    m->fs_ = MakeFs(options.params, options.peer_timeout_ms);
    if (!m->fs_) return nullptr;
    std::string mnt = m->fs_->dir.Sub("mnt");
    if (::mkdir(mnt.c_str(), 0755) != 0) {
      ADD_FAILURE() << "mkdir " << mnt << ": " << std::strerror(errno);
      return nullptr;
    }
    m->root_ = std::filesystem::canonical(mnt).string();
    m->log_path_ = m->fs_->dir.Sub("fused.log");
    if (!options.mount) return m;
    auto r = m->Mount();
    if (!r) {
      ADD_FAILURE() << r.message();
      return nullptr;
    }
    return m;
  }

  ~MountedFs() {
    if (reference_) {
      std::error_code ec;
      std::filesystem::remove_all(root_, ec);
      return;
    }
    if (::testing::Test::HasFailure()) PrintLog();
    if (pid_ > 0) {
      RunCmd({"fusermount3", "-u", root_}, std::chrono::seconds(30));
      int status = 0;
      if (!WaitPidFor(pid_, std::chrono::seconds(120), &status) &&
          ::waitpid(pid_, &status, WNOHANG) == 0) {  // still our unreaped child
        std::fprintf(stderr, "[ fs       ] daemon %d did not exit after unmount: SIGKILL\n", pid_);
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
      }
      pid_ = 0;
    }
    for (int i = 0; i < 3 && FindMount(root_); ++i) RunCmd({"umount", "-l", root_});
  }

  bool reference() const { return reference_; }
  // The directory the tests work in (the mount point or the reference dir).
  const std::string& root() const { return root_; }
  std::string Path(std::string_view rel) const { return root_ + "/" + std::string(rel); }
  // A path outside the mount, in this test's temporary directory.
  std::string Scratch(const std::string& name) const {
    return reference_ ? scratch_->Sub(name) : fs_->dir.Sub(name);
  }
  const std::string& state() const { return fs_->state; }
  // The private file holding the filesystem's passphrase, and the -o option
  // naming it.
  const std::string& passfile() const { return fs_->passfile; }
  std::string pass_option() const { return "passfile=" + fs_->passfile; }
  const OramParams& params() const { return options_.params; }
  pid_t pid() const { return pid_; }
  bool mounted() const { return pid_ > 0; }
  // The daemon's stdout/stderr, and its log_file.
  std::string log() const { return reference_ ? "" : ReadWholeFile(log_path_); }
  std::string daemon_log_path() const { return reference_ ? "" : fs_->dir.Sub("fused-log.txt"); }
  std::string daemon_log() const { return reference_ ? "" : ReadWholeFile(daemon_log_path()); }
  TestFs* test_fs() const { return fs_.get(); }
  // -o options for the next Mount().
  void set_mount_opts(std::string opts) { options_.mount_opts = std::move(opts); }

  // Starts `s3oramfs-fused STATE MNT -f [-o opts]` and waits until it is live.
  // extra_env ("NAME=value", e.g. S3ORAM_FAULT=...) is added to the daemon's environment.
  ::testing::AssertionResult Mount(std::chrono::seconds timeout = std::chrono::seconds(30),
                                   const std::vector<std::string>& extra_env = {}) {
    if (reference_) return ::testing::AssertionSuccess();
    if (pid_ > 0) return ::testing::AssertionFailure() << "already mounted";
    ++mounts_;
    {
      std::ofstream log(log_path_, std::ios::app);
      log << "===== test fixture: mount #" << mounts_ << " =====\n";
    }
    std::vector<std::string> argv = {FusedPath(), fs_->state, root_, "-f"};
    std::string opts = options_.mount_opts;
    if (options_.log_to_file) {
      opts = "log_file=" + daemon_log_path() + (opts.empty() ? "" : ",") + opts;
    }
    if (options_.pass_passfile) opts = pass_option() + (opts.empty() ? "" : ",") + opts;
    if (const char* e = std::getenv("S3ORAM_TEST_FUSED_OPTS"); e && *e) {
      opts += (opts.empty() ? "" : ",") + std::string(e);
    }
    if (!opts.empty()) {
      argv.push_back("-o");
      argv.push_back(opts);
    }
    std::vector<std::string> env_storage;
    for (char** e = environ; *e != nullptr; ++e) env_storage.emplace_back(*e);
    for (const auto& e : extra_env) env_storage.push_back(e);
    std::vector<char*> envp;
    for (auto& e : env_storage) envp.push_back(e.data());
    envp.push_back(nullptr);
    int logfd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0) return ::testing::AssertionFailure() << "open log: " << std::strerror(errno);
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(127);
      ::dup2(logfd, 1);
      ::dup2(logfd, 2);
      int nul = ::open("/dev/null", O_RDONLY);
      if (nul >= 0) ::dup2(nul, 0);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::execve(args[0], args.data(), envp.data());
      std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
      ::_exit(127);
    }
    ::close(logfd);
    if (pid < 0) return ::testing::AssertionFailure() << "fork: " << std::strerror(errno);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (IsS3oramMounted(root_)) {
        pid_ = pid;
        return ::testing::AssertionSuccess();
      }
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        return ::testing::AssertionFailure()
               << "s3oramfs-fused exited (" << DescribeWaitStatus(status)
               << ") before the mount was live; output:\n" << Tail(log(), 8000) << "\nlog_file:\n"
               << Tail(daemon_log(), 4000);
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        if (FindMount(root_)) RunCmd({"umount", "-l", root_});
        return ::testing::AssertionFailure()
               << "mount not live after " << timeout.count() << " s; log:\n" << Tail(log(), 8000);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // fusermount3 -u, then waits for the daemon to exit with status 0.
  ::testing::AssertionResult Unmount(std::chrono::seconds timeout = std::chrono::seconds(300)) {
    if (reference_) return ::testing::AssertionSuccess();
    if (pid_ <= 0) return ::testing::AssertionFailure() << "not mounted";
    CmdResult u = RunCmd({"fusermount3", "-u", root_}, std::chrono::seconds(60));
    if (u.exit_code != 0) {
      return ::testing::AssertionFailure() << "fusermount3 -u " << root_ << " failed ("
                                           << DescribeWaitStatus(u.wait_status) << "): " << u.output;
    }
    int status = 0;
    if (!WaitPidFor(pid_, timeout, &status)) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      pid_ = 0;
      return ::testing::AssertionFailure() << "daemon did not exit within " << timeout.count()
                                           << " s after unmount (SIGKILLed)";
    }
    pid_ = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return ::testing::AssertionFailure() << "daemon ended with " << DescribeWaitStatus(status)
                                           << " after unmount; log:\n" << Tail(log(), 8000);
    }
    if (FindMount(root_)) return ::testing::AssertionFailure() << root_ << " still mounted";
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult Remount() {
    auto u = Unmount();
    if (!u) return u;
    return Mount();
  }

  // SIGKILL to the daemon, reap it, and detach the dead mount (umount -l).
  ::testing::AssertionResult Kill9() {
    if (reference_) return ::testing::AssertionSuccess();
    if (pid_ <= 0) return ::testing::AssertionFailure() << "not mounted";
    ::kill(pid_, SIGKILL);
    int status = 0;
    bool reaped = WaitPidFor(pid_, std::chrono::seconds(60), &status);
    pid_ = 0;
    if (!reaped) return ::testing::AssertionFailure() << "daemon not reaped after SIGKILL";
    for (int i = 0; i < 3 && FindMount(root_); ++i) RunCmd({"umount", "-l", root_});
    if (FindMount(root_)) return ::testing::AssertionFailure() << "umount -l " << root_ << " failed";
    return ::testing::AssertionSuccess();
  }

  // True if the daemon has died by itself (a fault point, a crash): it is
  // reaped and its dead mount detached, ready for Mount().
  bool ReapIfDead() {
    if (reference_ || pid_ <= 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
    pid_ = 0;
    for (int i = 0; i < 3 && FindMount(root_); ++i) RunCmd({"umount", "-l", root_});
    return true;
  }

  // Sends `sig` (e.g. SIGTERM) to the daemon and waits for it to end; success
  // if it exits 0 and the mount is gone.
  ::testing::AssertionResult SignalAndWait(int sig, std::chrono::seconds timeout = std::chrono::seconds(300)) {
    if (reference_) return ::testing::AssertionSuccess();
    if (pid_ <= 0) return ::testing::AssertionFailure() << "not mounted";
    ::kill(pid_, sig);
    int status = 0;
    if (!WaitPidFor(pid_, timeout, &status)) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      pid_ = 0;
      if (FindMount(root_)) RunCmd({"umount", "-l", root_});
      return ::testing::AssertionFailure() << "daemon did not exit within " << timeout.count()
                                           << " s of signal " << sig << " (SIGKILLed)";
    }
    pid_ = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      if (FindMount(root_)) RunCmd({"umount", "-l", root_});
      return ::testing::AssertionFailure() << "daemon ended with " << DescribeWaitStatus(status)
                                           << " after signal " << sig;
    }
    if (FindMount(root_)) {
      RunCmd({"umount", "-l", root_});
      return ::testing::AssertionFailure() << "daemon exited but " << root_ << " stayed mounted";
    }
    return ::testing::AssertionSuccess();
  }

  void PrintLog() const {
    if (reference_ || !fs_) return;
    std::fprintf(stderr, "----- s3oramfs-fused stdout/stderr (%s), last 8 KiB -----\n%s\n",
                 log_path_.c_str(), Tail(log(), 8192).c_str());
    std::fprintf(stderr, "----- s3oramfs-fused log_file (%s), last 16 KiB -----\n%s\n-----\n",
                 daemon_log_path().c_str(), Tail(daemon_log(), 16384).c_str());
  }

 private:
  MountedFs() = default;

  FsOptions options_;
  bool reference_ = false;
  std::unique_ptr<TestFs> fs_;         // daemon mode
  std::unique_ptr<TempDir> scratch_;   // reference mode
  std::string root_;
  std::string log_path_;
  pid_t pid_ = 0;
  int mounts_ = 0;
};

// "CMD -s STATE --passfile PASS REST": a CLI command line for RunCli.
inline std::string CliArgs(const MountedFs& fs, const std::string& cmd,
                           const std::string& rest = "") {
  return cmd + " -s " + fs.state() + " --passfile " + fs.passfile() + " " + rest;
}

// Every file (name -> content) reads back through the mount, byte for byte.
inline void ExpectFilesIn(const MountedFs& fs, const std::map<std::string, std::string>& files) {
  for (const auto& [name, want] : files) {
    EXPECT_TRUE(FileHasContent(fs.Path(name), want)) << name;
  }
}

// The client state at `path` opened with passphrase `pass` (not mounted),
// for a test to read what the state records.
inline Result<std::unique_ptr<ClientStateStore>> OpenStateWithPassphrase(const std::string& path,
                                                                         const std::string& pass) {
  S3ORAM_ASSIGN_OR_RETURN(auto unlocked, UnlockedState::Unlock(path, Secret::CopyOf(pass)));
  return ClientStateStore::Open(std::shared_ptr<UnlockedState>(std::move(unlocked)));
}

#define S3ORAM_SKIP_IN_REFERENCE(fs) \
  if (!(fs).reference()) {                \
  } else                                  \
    GTEST_SKIP() << "needs the s3oramfs daemon (reference mode)"

}  // namespace s3oram::testing

// The s3oram command line as users run it: the real binary, real servers.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "serverd/share_store.h"
#include "tests/integration/cluster_fixture.h"

namespace s3oram {
namespace {

using testing::TempDir;

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CliRun RunCliRaw(const std::string& cmd) {
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

CliRun RunCli(const std::string& args) {
  const char* cli = std::getenv("S3ORAM_CLI");
  return RunCliRaw(std::string(cli ? cli : S3ORAM_TEST_CLI) + " " + args + " 2>&1");
}

// Argon2id at its minimum cost for CLI tests (below the floor, so allowed
// only with --insecure-kdf).
constexpr const char* kCheapKdf = " --kdf-ops 1 --kdf-mem 8K --insecure-kdf";

Status WriteText(const std::string& path, std::string_view text) {
  return WritePrivateFile(
      path, std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

// Runs the CLI in a new session (setsid): no controlling terminal, so a
// missing passphrase cannot fall back to a prompt.
CliRun RunCliNoTty(const std::string& args, const std::string& env = "") {
  const char* cli = std::getenv("S3ORAM_CLI");
  return RunCliRaw(env + " setsid -w " + std::string(cli ? cli : S3ORAM_TEST_CLI) + " " + args +
                   " 2>&1 </dev/null");
}

TEST(CliTest, ParamsReportsSafeBucketSizeForPaperSetting) {
  CliRun r = RunCli("params --evict-rate 280 --height 14");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(bucket size Z\s+(\d+))"))) << r.output;
  EXPECT_GE(std::stoi(m[1]), 460) << r.output;
  CliRun json = RunCli("params --evict-rate 280 --height 14 --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_NE(json.output.find("\"bucket_size\": "), std::string::npos);
}

TEST(CliTest, ParamsRefusesUnsafeBucketSizeUnlessAllowed) {
  CliRun r = RunCli("params --evict-rate 280 --height 8 --bucket-size 333");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("overflow"), std::string::npos) << r.output;
  CliRun forced = RunCli("params --evict-rate 280 --height 8 --bucket-size 333 --allow-unsafe-params");
  EXPECT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_NE(forced.output.find("UNSAFE"), std::string::npos) << forced.output;
}

// `cluster start` detaches its servers: stop them however the test ends (an
// early ASSERT must not leave them running after the directory is gone).
struct ClusterStopGuard {
  std::string dir;
  ~ClusterStopGuard() { RunCli("cluster stop --dir " + dir); }
};

TEST(CliTest, ClusterInitStatusAndStop) {
  TempDir dir;
  ClusterStopGuard guard{dir.Sub("c")};  // destroyed before dir: stops first
  CliRun start = RunCli("cluster start --dir " + dir.Sub("c") + " --log-level warn");
  ASSERT_EQ(start.exit_code, 0) << start.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      start.output, m,
      std::regex(R"(servers:(( --server \S+ --server-key \S+){3} --client-key \S+))")))
      << start.output;
  const std::string servers = m[1];
  ASSERT_TRUE(WriteText(dir.Sub("pass"), "init passphrase\n").ok());
  // A cost below the Argon2id floor is refused before anything is written,
  // naming the way out.
  CliRun weak = RunCli("init --state " + dir.Sub("weak.s3oram") + servers + " --passfile " +
                       dir.Sub("pass") + " --kdf-ops 1 --kdf-mem 8M --block-size 512 --capacity 256K");
  EXPECT_EQ(weak.exit_code, 2) << weak.output;
  EXPECT_NE(weak.output.find("--insecure-kdf"), std::string::npos) << weak.output;
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("weak.s3oram")));
  CliRun init = RunCli("init --state " + dir.Sub("fs.s3oram") + servers + " --passfile " +
                       dir.Sub("pass") + kCheapKdf + " --block-size 512 --capacity 256K --evict-rate 8");
  EXPECT_EQ(init.exit_code, 0) << init.output;
  EXPECT_NE(init.output.find("bucket size Z"), std::string::npos) << init.output;
  // Without the passphrase only the clear header is shown.
  CliRun header = RunCli("status --state " + dir.Sub("fs.s3oram"));
  EXPECT_EQ(header.exit_code, 0) << header.output;
  EXPECT_NE(header.output.find("fs id"), std::string::npos) << header.output;
  EXPECT_NE(header.output.find("need the passphrase"), std::string::npos) << header.output;
  EXPECT_EQ(header.output.find("server 2"), std::string::npos) << header.output;
  CliRun status =
      RunCli("status --state " + dir.Sub("fs.s3oram") + " --passfile " + dir.Sub("pass"));
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("server 2"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find(" up,"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("lease 2     free"), std::string::npos) << status.output;
  {
    // One server stopped (SIGSTOP): status shows the other two, names the
    // stopped one, and exits 1, after one timeout (every server is asked
    // at once, each on its own).
    std::ifstream pid_file(dir.Sub("c") + "/server-1.pid");
    pid_t pid = 0;
    ASSERT_TRUE(pid_file >> pid) << "no pid for server 1";
    ASSERT_EQ(::kill(pid, SIGSTOP), 0);
    struct Resume {
      pid_t pid;
      ~Resume() { ::kill(pid, SIGCONT); }
    } resume{pid};
    // 5 s: only the stopped server waits it out; a running one slowed by a
    // busy machine is not taken for down.
    CliRun one_down = RunCli("status --timeout-ms 5000 --state " + dir.Sub("fs.s3oram") +
                             " --passfile " + dir.Sub("pass"));
    EXPECT_EQ(one_down.exit_code, 1) << one_down.output;
    EXPECT_TRUE(std::regex_search(one_down.output,
                                  std::regex(R"(server 1 +\S+ +UNREACHABLE: .*did not answer)")))
        << one_down.output;
    EXPECT_TRUE(std::regex_search(one_down.output, std::regex(R"(server 0 +\S+ +up,)")))
        << one_down.output;
    EXPECT_TRUE(std::regex_search(one_down.output, std::regex(R"(server 2 +\S+ +up,)")))
        << one_down.output;
    EXPECT_NE(one_down.output.find("lease 0     free"), std::string::npos) << one_down.output;
    EXPECT_NE(one_down.output.find("backup 2    none"), std::string::npos) << one_down.output;
    EXPECT_EQ(one_down.output.find("lease 1 "), std::string::npos) << one_down.output;
  }
  // init refuses to overwrite the state file.
  CliRun again = RunCli("init --state " + dir.Sub("fs.s3oram") + servers + " --passfile " +
                        dir.Sub("pass"));
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.output.find("already exists"), std::string::npos) << again.output;
  CliRun stop = RunCli("cluster stop --dir " + dir.Sub("c"));
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
  CliRun down = RunCli("status --timeout-ms 500 --state " + dir.Sub("fs.s3oram") + " --passfile " +
                       dir.Sub("pass"));
  EXPECT_NE(down.exit_code, 0) << down.output;
}

// Four servers from the command line: `cluster start --servers 4`, `init`
// with four endpoints (ℓ = 4, t = 1, printed), status of all four;
// `params --servers` shows what each ℓ costs; fewer than three servers are
// refused before anything is written.
TEST(CliTest, FourServersFromInitToStatus) {
  TempDir dir;
  ClusterStopGuard guard{dir.Sub("c")};
  CliRun start = RunCli("cluster start --servers 4 --dir " + dir.Sub("c") + " --log-level warn");
  ASSERT_EQ(start.exit_code, 0) << start.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      start.output, m,
      std::regex(R"(servers:(( --server \S+ --server-key \S+){4}) --client-key (\S+))")))
      << start.output;
  const std::string servers = m[1];
  const std::string client_key = " --client-key " + std::string(m[3]);
  ASSERT_TRUE(WriteText(dir.Sub("pass"), "init passphrase\n").ok());
  CliRun init =
      RunCli("init --state " + dir.Sub("fs.s3oram") + servers + client_key + " --passfile " +
             dir.Sub("pass") + kCheapKdf + " --block-size 512 --capacity 256K --evict-rate 8");
  ASSERT_EQ(init.exit_code, 0) << init.output;
  EXPECT_NE(init.output.find("on 4 servers"), std::string::npos) << init.output;
  EXPECT_NE(init.output.find("servers ℓ           4, privacy threshold t = 1"), std::string::npos)
      << init.output;
  CliRun status =
      RunCli("status --state " + dir.Sub("fs.s3oram") + " --passfile " + dir.Sub("pass"));
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("sharing     4 servers, privacy threshold t = 1"), std::string::npos)
      << status.output;
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::regex_search(status.output,
                                  std::regex("server " + std::to_string(i) + R"( +\S+ +up,)")))
        << status.output;
    EXPECT_NE(status.output.find("lease " + std::to_string(i) + "     free"), std::string::npos)
        << status.output;
  }
  // Two servers: refused, nothing written.
  const std::string first_two =
      servers.substr(0, servers.find(" --server ", servers.find(" --server ", 1) + 1));
  CliRun refused =
      RunCli("init --state " + dir.Sub("two.s3oram") + first_two + client_key + " --passfile " +
             dir.Sub("pass") + kCheapKdf + " --block-size 512 --capacity 256K --evict-rate 8");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("need 3 to 16 servers, got 2"), std::string::npos)
      << refused.output;
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("two.s3oram")));
  // What each ℓ costs: the client's upload and the servers' exchange grow with
  // it. One server gets seeds instead of its select and root shares, so that
  // part is ℓ - 1 servers' (3 against 2), and the eviction matrices ℓ's (4
  // against 3).
  CliRun p3 = RunCli("params --json --servers 3");
  CliRun p4 = RunCli("params --json --servers 4");
  ASSERT_EQ(p3.exit_code, 0) << p3.output;
  ASSERT_EQ(p4.exit_code, 0) << p4.output;
  EXPECT_NE(p4.output.find("\"servers\": 4, \"threshold\": 1"), std::string::npos) << p4.output;
  std::smatch up3, up4;
  ASSERT_TRUE(std::regex_search(p3.output, up3, std::regex(R"("client_upload_bytes": ([0-9]+))")));
  ASSERT_TRUE(std::regex_search(p4.output, up4, std::regex(R"("client_upload_bytes": ([0-9]+))")));
  const double ratio = std::stod(up4[1]) / std::stod(up3[1]);
  EXPECT_GT(ratio, 4.0 / 3.0) << p3.output << "\n" << p4.output;
  EXPECT_LT(ratio, 3.0 / 2.0) << p3.output << "\n" << p4.output;
  CliRun stop = RunCli("cluster stop --dir " + dir.Sub("c"));
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
}

// passwd rewraps the master key: data written under the old passphrase read
// back under the new one; the old one (and a wrong one) is refused with a
// clear message; passphrase files with loose modes and missing passphrases
// are refused before anything changes.
TEST(CliTest, PasswdChangesThePassphraseAndKeepsTheData) {
  TempDir dir;
  auto cl = testing::StartCluster(dir.Sub("c"));
  ASSERT_TRUE(cl);
  std::string servers;
  for (std::size_t i = 0; i < cl->endpoints().size(); ++i) {
    servers += " --server " + cl->endpoints()[i] + " --server-key " + cl->server_public_key_file(i);
  }
  servers += " --client-key " + cl->client_key_file();
  const std::string state = dir.Sub("fs.s3oram");
  ASSERT_TRUE(WriteText(dir.Sub("old"), "old passphrase\n").ok());
  ASSERT_TRUE(WriteText(dir.Sub("new"), "new passphrase").ok());
  CliRun init = RunCliNoTty("init --state " + state + servers + " --passfile " + dir.Sub("old") +
                            kCheapKdf + " --block-size 512 --capacity 64K --evict-rate 8");
  ASSERT_EQ(init.exit_code, 0) << init.output;

  const std::vector<std::uint8_t> data = testing::Content(512, 7, 1);
  {
    auto c = OramClient::Open(state, Secret::CopyOf(std::string_view("old passphrase")));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE((*c)->Write(7, data).ok());
  }

  // No passphrase source at all: a clear error, not a hang.
  CliRun none = RunCliNoTty("passwd --state " + state + " --insecure-kdf");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.output.find("--passfile"), std::string::npos) << none.output;
  // A passphrase file others can read is refused.
  ASSERT_TRUE(WriteText(dir.Sub("loose"), "old passphrase").ok());
  ASSERT_EQ(::chmod(dir.Sub("loose").c_str(), 0644), 0);
  CliRun loose = RunCliNoTty("passwd --state " + state + " --passfile " + dir.Sub("loose") +
                             " --new-passfile " + dir.Sub("new") + " --insecure-kdf");
  EXPECT_NE(loose.exit_code, 0);
  EXPECT_NE(loose.output.find("chmod 600"), std::string::npos) << loose.output;
  // A wrong current passphrase changes nothing.
  CliRun wrong = RunCliNoTty("passwd --state " + state + " --passfile " + dir.Sub("new") +
                             " --new-passfile " + dir.Sub("new") + " --insecure-kdf");
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.output.find("wrong passphrase"), std::string::npos) << wrong.output;

  // The cost kept from init is below the floor: without --insecure-kdf
  // passwd refuses before it asks for anything, naming the flag.
  CliRun weak = RunCliNoTty("passwd --state " + state + " --new-passfile " + dir.Sub("new"),
                            "S3ORAM_PASSPHRASE='old passphrase'");
  EXPECT_EQ(weak.exit_code, 2) << weak.output;
  EXPECT_NE(weak.output.find("--insecure-kdf"), std::string::npos) << weak.output;
  EXPECT_TRUE(OramClient::Open(state, Secret::CopyOf(std::string_view("old passphrase"))).ok());

  // The real change, old passphrase from the environment this time.
  CliRun ok = RunCliNoTty("passwd --state " + state + " --new-passfile " + dir.Sub("new") +
                              " --insecure-kdf",
                          "S3ORAM_PASSPHRASE='old passphrase'");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;

  auto old_open = OramClient::Open(state, Secret::CopyOf(std::string_view("old passphrase")));
  ASSERT_FALSE(old_open.ok());
  EXPECT_EQ(old_open.status().code(), Status::Code::kPermissionDenied);
  EXPECT_NE(old_open.status().message().find("wrong passphrase"), std::string::npos);
  auto c = OramClient::Open(state, Secret::CopyOf(std::string_view("new passphrase")));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto back = (*c)->Read(7);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);
}

TEST(CliTest, BenchVerifiesAndReportsJson) {
  CliRun r = RunCli("bench --block-size 512 --height 4 --evict-rate 8 --accesses 300 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* key : {"\"mean_ms\"", "\"p50_ms\"", "\"p99_ms\"", "\"accesses_per_s\"",
                          "\"client_server_bytes_per_access\"", "\"server_server_bytes_per_access\""}) {
    EXPECT_NE(r.output.find(key), std::string::npos) << key << " missing in " << r.output;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"("evictions": (\d+))")));
  EXPECT_GE(std::stoi(m[1]), 30);
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"("server_server_bytes_per_access": (\d+))")));
  EXPECT_GT(std::stoll(m[1]), 0);
}

// --age must leave no bucket a sparse hole: on every server, every bucket of
// the tree holds written bytes before the measured accesses start (a fresh
// tree's deeper buckets are all zeros).
TEST(CliTest, BenchAgeWritesEveryBucketBeforeMeasuring) {
  TempDir tmp;
  const std::string dir = tmp.Sub("bench");
  CliRun r = RunCli(
      "bench --block-size 512 --height 4 --evict-rate 8 --accesses 16 --age --json --keep --dir " +
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  auto number = [&](const char* key) -> std::uint64_t {
    EXPECT_TRUE(std::regex_search(r.output, m, std::regex(std::string("\"") + key + R"(": (\d+))")))
        << key << " missing in " << r.output;
    return m.empty() ? 0 : std::stoull(m[1]);
  };
  EXPECT_NE(r.output.find("\"aged\": true"), std::string::npos) << r.output;
  const std::uint64_t height = number("height"), z = number("bucket_size"),
                      rate = number("evict_rate"), n = number("capacity_blocks"),
                      m_elems = number("elems_per_slot"), aging = number("aging_accesses");
  ASSERT_EQ(height, 4u);
  // At least every block once and 2^(H-1) evictions' worth of accesses.
  EXPECT_GE(aging, n);
  EXPECT_GE(aging, (std::uint64_t{1} << (height - 1)) * rate);
  const std::uint64_t bucket_bytes = z * m_elems * 4;
  const std::uint64_t buckets = (std::uint64_t{2} << height) - 1;
  for (int server = 0; server < 3; ++server) {
    const std::string shares = dir + "/data-" + std::to_string(server) + "/shares.bin";
    std::ifstream f(shares, std::ios::binary);
    ASSERT_TRUE(f.good()) << shares;
    // Where each bucket lies now (buckets move as evictions commit).
    auto at = serverd::StoreInspection::InspectFile(shares);
    ASSERT_TRUE(at.ok()) << at.status().ToString();
    std::vector<char> bucket(bucket_bytes);
    for (std::uint64_t b = 1; b <= buckets; ++b) {
      f.seekg(static_cast<std::streamoff>((*at)[b].data));
      f.read(bucket.data(), static_cast<std::streamsize>(bucket.size()));
      ASSERT_EQ(f.gcount(), static_cast<std::streamsize>(bucket.size()))
          << shares << " bucket " << b;
      EXPECT_TRUE(std::any_of(bucket.begin(), bucket.end(), [](char c) { return c != 0; }))
          << "server " << server << " bucket " << b << " was never written";
    }
  }
}

// A command waiting at the passphrase prompt is not dumpable: no core file,
// no ptrace and no /proc/PID/mem for other processes of its user. Run as an
// unprivileged user (the test runs as root on CI) so that /proc shows the
// kernel's view: a non-dumpable process's /proc files belong to root, a
// dumpable one's to its own user. Its core size limit must be zero too.
TEST(CliTest, ACommandHoldingAPassphraseCannotBeDumped) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run the CLI as another user";
  constexpr uid_t kNobody = 65534;
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT_GE(master, 0) << std::strerror(errno);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  const std::string slave_path = ::ptsname(master);
  const char* env_cli = std::getenv("S3ORAM_CLI");
  // `nobody` may not reach the build tree (a checkout under a 0700
  // directory, as mktemp -d makes): it runs a copy in a directory of its own.
  TempDir bin_dir;
  ASSERT_EQ(::chmod(bin_dir.path().c_str(), 0755), 0);
  const std::string cli = bin_dir.Sub("s3oram");
  std::filesystem::copy_file(env_cli ? env_cli : S3ORAM_TEST_CLI, cli);
  ASSERT_EQ(::chmod(cli.c_str(), 0755), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // A new session whose controlling terminal is the pty: the prompt's
    // /dev/tty. Only async-signal-safe calls until exec.
    ::setsid();
    const int slave = ::open(slave_path.c_str(), O_RDWR);
    if (slave < 0) ::_exit(125);
    ::dup2(slave, 0);
    ::dup2(slave, 1);
    ::dup2(slave, 2);
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(126);
    char* const argv[] = {const_cast<char*>(cli.c_str()), const_cast<char*>("init"),
                          const_cast<char*>("--state"), const_cast<char*>("/nonexistent/fs.s3oram"),
                          // Three servers (init refuses fewer before its prompt);
                          // the command never gets as far as reaching them.
                          const_cast<char*>("--server"), const_cast<char*>("tcp://127.0.0.1:9"),
                          const_cast<char*>("--server"), const_cast<char*>("tcp://127.0.0.1:9"),
                          const_cast<char*>("--server"), const_cast<char*>("tcp://127.0.0.1:9"),
                          const_cast<char*>("--server-key"), const_cast<char*>("k"),
                          const_cast<char*>("--server-key"), const_cast<char*>("k"),
                          const_cast<char*>("--server-key"), const_cast<char*>("k"),
                          const_cast<char*>("--client-key"), const_cast<char*>("k"), nullptr};
    char* const envp[] = {const_cast<char*>("PATH=/usr/bin:/bin"), nullptr};
    ::execve(argv[0], argv, envp);
    ::_exit(127);
  }
  struct Reap {
    pid_t pid;
    int fd;
    ~Reap() {
      if (pid > 0) {  // never kill(-1, ...): that would signal every process
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
      ::close(fd);
    }
  } reap{pid, master};
  // Wait (bounded) for the prompt: by then the passphrase is being read.
  std::string seen;
  for (int i = 0; i < 600 && seen.find("New passphrase") == std::string::npos; ++i) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char buf[256];
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n <= 0) break;
      seen.append(buf, static_cast<std::size_t>(n));
    }
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      reap.pid = -1;  // already reaped; nothing to kill
      FAIL() << "the CLI ended before prompting (status " << status << "): " << seen;
    }
  }
  ASSERT_NE(seen.find("New passphrase"), std::string::npos) << seen;
  const std::string proc = "/proc/" + std::to_string(pid);
  struct stat st{};
  ASSERT_EQ(::stat((proc + "/status").c_str(), &st), 0);
  // Sanity: the process really runs as nobody.
  std::ifstream status_file(proc + "/status");
  std::string line, uid_line;
  while (std::getline(status_file, line)) {
    if (line.rfind("Uid:", 0) == 0) uid_line = line;
  }
  EXPECT_NE(uid_line.find(std::to_string(kNobody)), std::string::npos) << uid_line;
  EXPECT_EQ(st.st_uid, 0u) << "/proc/" << pid << " belongs to uid " << st.st_uid
                           << ": the kernel considers the process dumpable";
  std::ifstream limits(proc + "/limits");
  std::string core_line;
  while (std::getline(limits, line)) {
    if (line.rfind("Max core file size", 0) == 0) core_line = line;
  }
  EXPECT_TRUE(std::regex_search(core_line, std::regex(R"(size\s+0\s+0\s)"))) << core_line;
}

}  // namespace
}  // namespace s3oram

#include "cli/local_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>

#include "oramcore/base/random.h"
#include "oramcore/crypto/curve_keys.h"
#include "serverd/config.h"

namespace s3oram::cluster {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// Binds, or connects, a TCP socket to 127.0.0.1:port; true on success.
bool LoopbackSocket(std::uint16_t port, bool connect) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  bool ok = (connect ? ::connect(fd, sa, sizeof addr) : ::bind(fd, sa, sizeof addr)) == 0;
  ::close(fd);
  return ok;
}
bool PortFree(std::uint16_t port) { return LoopbackSocket(port, /*connect=*/false); }
bool PortAccepts(std::uint16_t port) { return LoopbackSocket(port, /*connect=*/true); }

// A random first port of `count` consecutive ports outside the kernel's
// ephemeral range: a port inside it can be taken as the source port of any
// outgoing connection on the machine (a concurrent test's client) while its
// server is down for a restart, and the restart then fails to bind.
std::uint16_t RandomBasePort(std::size_t count) {
  unsigned lo = 32768, hi = 60999;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  unsigned a = 0, b = 0;
  if (range >> a >> b && a <= b && b <= 65535) lo = a, hi = b;
  // Candidate first ports: [10000, lo - count] and [hi + 1, 65536 - count].
  const unsigned low_first = 10000, low_last = lo > low_first + count ? lo - count : 0;
  const unsigned high_first = hi + 1, high_last = 65536 - static_cast<unsigned>(count);
  const unsigned low_n = low_last >= low_first && low_last != 0 ? low_last - low_first + 1 : 0;
  const unsigned high_n = high_last >= high_first ? high_last - high_first + 1 : 0;
  if (low_n + high_n < 64) {  // a machine whose ephemeral range covers nearly everything
    return static_cast<std::uint16_t>(20000 + random::Below(40000 - count));
  }
  const unsigned pick = static_cast<unsigned>(random::Below(low_n + high_n));
  return static_cast<std::uint16_t>(pick < low_n ? low_first + pick : high_first + (pick - low_n));
}

std::string ReadTail(const std::string& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > max_bytes) s = s.substr(s.size() - max_bytes);
  return s;
}

// True if pid runs s3oram-serverd with `config` on its command line.
bool IsOurServer(pid_t pid, const std::string& config) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  if (!in) return false;
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cmdline.find("s3oram-serverd") != std::string::npos &&
         cmdline.find(config) != std::string::npos;
}

// Waits for pid to end; for a child, reaps it and stores its wait status.
bool WaitGone(pid_t pid, bool is_child, std::chrono::milliseconds timeout,
              int* wait_status = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (is_child) {
      int status = 0;
      pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid && wait_status) *wait_status = status;
      if (r == pid || (r < 0 && errno == ECHILD)) return true;
    } else if (::kill(pid, 0) != 0 && errno == ESRCH) {
      return true;
    }
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

}  // namespace

std::string FindServerd() {
  if (const char* env = std::getenv("S3ORAM_SERVERD"); env && *env) return env;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& candidate :
         {self.parent_path() / "s3oram-serverd", self.parent_path().parent_path() / "serverd" / "s3oram-serverd",
          self.parent_path().parent_path() / "sbin" / "s3oram-serverd"}) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  return "/usr/sbin/s3oram-serverd";
}

std::string LocalCluster::config_path(std::size_t i) const {
  return (fs::path(options_.dir) / ("server-" + std::to_string(i) + ".toml")).string();
}
std::string LocalCluster::server_public_key_file(std::size_t i) const {
  return (fs::absolute(options_.dir) / ("server-" + std::to_string(i) + ".pub")).string();
}
std::string LocalCluster::log_path(std::size_t i) const {
  return (fs::path(options_.dir) / ("server-" + std::to_string(i) + ".log")).string();
}

Result<std::unique_ptr<LocalCluster>> LocalCluster::Start(const LocalClusterOptions& options) {
  // Ports are probed free before the servers bind them, so another process
  // (a concurrent test's cluster) can take one in between: then the whole
  // start is retried on a new random range.
  for (int attempt = 1;; ++attempt) {
    auto c = StartOnce(options);
    if (c.ok() || options.base_port != 0 || attempt == 5 ||
        c.status().message().find("Address already in use") == std::string::npos) {
      return c;
    }
  }
}

Result<std::unique_ptr<LocalCluster>> LocalCluster::StartOnce(const LocalClusterOptions& options) {
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  c->options_ = options;
  if (c->options_.serverd_path.empty()) c->options_.serverd_path = FindServerd();
  if (::access(c->options_.serverd_path.c_str(), X_OK) != 0) {
    return Status::NotFound("s3oram-serverd not found at " + c->options_.serverd_path +
                            " (set S3ORAM_SERVERD)");
  }
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) return Status::IoError("creating " + options.dir + ": " + ec.message());
  ::chmod(options.dir.c_str(), 0700);

  const std::size_t n = options.servers;
  std::uint16_t base = options.base_port;
  if (base == 0) {
    for (int tries = 0; tries < 200 && base == 0; ++tries) {
      const std::uint16_t candidate = RandomBasePort(2 * n);
      bool all = true;
      for (std::size_t k = 0; k < 2 * n && all; ++k) {
        all = PortFree(static_cast<std::uint16_t>(candidate + k));
      }
      if (all) base = candidate;
    }
    if (base == 0) return Status::Unavailable("no free port range on 127.0.0.1");
  }
  for (std::size_t k = 0; k < 2 * n; ++k) c->ports_.push_back(static_cast<std::uint16_t>(base + k));

  // CURVE keys: one per server and one for the local client, kept in the
  // directory (reused if the directory already has them, so a restarted
  // cluster still accepts its clients).
  auto keypair = [&](const std::string& name) -> Result<CurveKeypair> {
    const std::string prefix = (fs::absolute(options.dir) / name).string();
    if (fs::exists(prefix + ".key")) return LoadCurveKeypair(prefix + ".key");
    S3ORAM_ASSIGN_OR_RETURN(CurveKeypair k, GenerateCurveKeypair());
    S3ORAM_RETURN_IF_ERROR(WriteCurveKeypair(k, prefix));
    return k;
  };
  S3ORAM_ASSIGN_OR_RETURN(CurveKeypair client_key, keypair("client"));
  c->client_key_file_ = (fs::absolute(options.dir) / "client.key").string();
  for (std::size_t i = 0; i < n; ++i) {
    S3ORAM_ASSIGN_OR_RETURN(CurveKeypair k, keypair("server-" + std::to_string(i)));
    c->server_keys_.push_back(k.public_key);
  }

  for (std::size_t i = 0; i < n; ++i) {
    serverd::ServerConfig cfg;
    cfg.index = static_cast<std::uint32_t>(i);
    cfg.listen = "tcp://127.0.0.1:" + std::to_string(c->ports_[i]);
    cfg.peer_listen = "tcp://127.0.0.1:" + std::to_string(c->ports_[n + i]);
    cfg.data_dir = (fs::absolute(options.dir) / ("data-" + std::to_string(i))).string();
    // All n servers share this machine's cores: by default each gets its
    // share of them, not all of them (n servers x all cores oversubscribes,
    // and a kernel split across threads that are not running waits for the
    // slowest part).
    cfg.threads = options.threads != 0
                      ? options.threads
                      : std::max<std::uint32_t>(
                            1, std::thread::hardware_concurrency() / static_cast<std::uint32_t>(n));
    cfg.sync = options.sync;
    cfg.peer_timeout_ms = options.peer_timeout_ms;
    cfg.log_level = options.log_level;
    cfg.secret_key_file =
        (fs::absolute(options.dir) / ("server-" + std::to_string(i) + ".key")).string();
    cfg.authorized_clients = {client_key.public_key};
    for (const std::string& extra : options.extra_authorized_clients) {
      cfg.authorized_clients.push_back(extra);
    }
    for (std::size_t j = 0; j < n; ++j) {
      if (j == i) continue;
      cfg.peers.push_back({static_cast<std::uint32_t>(j),
                           "tcp://127.0.0.1:" + std::to_string(c->ports_[n + j]),
                           c->server_keys_[j]});
    }
    std::ofstream out(c->config_path(i), std::ios::trunc);
    out << serverd::RenderServerConfig(cfg);
    if (!out) return Status::IoError("writing " + c->config_path(i));
    c->endpoints_.push_back(cfg.listen);
  }
  c->pids_.assign(n, -1);
  for (std::size_t i = 0; i < n; ++i) S3ORAM_RETURN_IF_ERROR(c->Spawn(i));
  for (std::size_t i = 0; i < n; ++i) S3ORAM_RETURN_IF_ERROR(c->WaitReady(i));
  return c;
}

Status LocalCluster::Spawn(std::size_t i, const std::vector<std::string>& extra_env,
                           const std::string& binary) {
  const std::string config = config_path(i);
  const std::string program = binary.empty() ? options_.serverd_path : binary;
  const std::string log = log_path(i);
  // The environment, built before fork (the child may only make
  // async-signal-safe calls).
  // An extra entry replaces an inherited one of the same name (getenv
  // would find the inherited one first).
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('=') + 1);
    const bool replaced = std::any_of(extra_env.begin(), extra_env.end(), [&](const auto& x) {
      return std::string_view(x).substr(0, name.size()) == name;
    });
    if (!replaced) env_storage.emplace_back(entry);
  }
  for (const auto& e : extra_env) env_storage.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  const bool tie = options_.tie_to_parent;
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return Status::IoError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    ::setsid();
    if (tie) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(1);
    }
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    const char* argv[] = {"s3oram-serverd", "--config", config.c_str(), nullptr};
    ::execve(program.c_str(), const_cast<char* const*>(argv), envp.data());
    ::_exit(127);
  }
  pids_[i] = pid;
  std::ofstream pidfile((fs::path(options_.dir) / ("server-" + std::to_string(i) + ".pid")).string(),
                        std::ios::trunc);
  pidfile << pid << "\n";
  return Status::Ok();
}

Status LocalCluster::WaitReady(std::size_t i) {
  const std::size_t n = options_.servers;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (::waitpid(pids_[i], &status, WNOHANG) == pids_[i]) {
      pids_[i] = -1;
      return Status::Unavailable("s3oram-serverd " + std::to_string(i) + " exited at start:\n" +
                                 ReadTail(log_path(i), 2000));
    }
    if (PortAccepts(ports_[i]) && PortAccepts(ports_[n + i])) return Status::Ok();
    std::this_thread::sleep_for(20ms);
  }
  return Status::Unavailable("s3oram-serverd " + std::to_string(i) + " not listening after 20 s:\n" +
                             ReadTail(log_path(i), 2000));
}

Status LocalCluster::Kill(std::size_t i, int sig) {
  if (pids_.at(i) <= 0) return Status::FailedPrecondition("server " + std::to_string(i) + " is not running");
  if (::kill(pids_[i], sig) != 0) return Status::IoError(std::string("kill: ") + std::strerror(errno));
  if (sig == SIGKILL || sig == SIGTERM) {
    int status = 0;
    if (!WaitGone(pids_[i], true, 10s, &status)) {
      ::kill(pids_[i], SIGKILL);
      WaitGone(pids_[i], true, 5s, &status);
    }
    pids_[i] = -1;
    last_wait_status_ = status;
  }
  return Status::Ok();
}

Status LocalCluster::Restart(std::size_t i, const std::vector<std::string>& extra_env,
                             const std::string& binary) {
  if (pids_.at(i) > 0) return Status::FailedPrecondition("server " + std::to_string(i) + " is running");
  S3ORAM_RETURN_IF_ERROR(Spawn(i, extra_env, binary));
  return WaitReady(i);
}

bool LocalCluster::Exited(std::size_t i) {
  if (pids_.at(i) <= 0) return true;
  int status = 0;
  if (::waitpid(pids_[i], &status, WNOHANG) != pids_[i]) return false;
  pids_[i] = -1;
  last_wait_status_ = status;
  return true;
}

Status LocalCluster::Stop() {
  for (std::size_t i = 0; i < pids_.size(); ++i) {
    if (pids_[i] > 0) ::kill(pids_[i], SIGTERM);
  }
  for (std::size_t i = 0; i < pids_.size(); ++i) {
    if (pids_[i] <= 0) continue;
    if (!WaitGone(pids_[i], true, 10s)) {
      ::kill(pids_[i], SIGKILL);
      WaitGone(pids_[i], true, 5s);
    }
    pids_[i] = -1;
    std::error_code ec;
    fs::remove(fs::path(options_.dir) / ("server-" + std::to_string(i) + ".pid"), ec);
  }
  return Status::Ok();
}

void LocalCluster::Detach() { detached_ = true; }

LocalCluster::~LocalCluster() {
  if (!detached_) Stop();
}

Status LocalCluster::StopDir(const std::string& dir) {
  std::size_t stopped = 0;
  for (std::size_t i = 0;; ++i) {
    fs::path pidfile = fs::path(dir) / ("server-" + std::to_string(i) + ".pid");
    fs::path config = fs::path(dir) / ("server-" + std::to_string(i) + ".toml");
    if (!fs::exists(config)) break;
    std::ifstream in(pidfile);
    pid_t pid = 0;
    if (!(in >> pid) || pid <= 0) continue;
    if (IsOurServer(pid, config.filename().string())) {
      ::kill(pid, SIGTERM);
      if (!WaitGone(pid, false, 10s) && IsOurServer(pid, config.filename().string())) {
        ::kill(pid, SIGKILL);
        WaitGone(pid, false, 5s);
      }
      ++stopped;
    }
    std::error_code ec;
    fs::remove(pidfile, ec);
  }
  if (stopped == 0) return Status::NotFound("no running server of the cluster in " + dir);
  return Status::Ok();
}

}  // namespace s3oram::cluster

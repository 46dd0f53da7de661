// s3oramfs-fused: the s3oramfs FUSE daemon and mount helper
// (man 8 s3oramfs-fused, mount.s3oramfs).
//
// Start-up order matters:
//  1. parse the command line (mount-helper or daemon role, from argv[0]),
//     reading the --config file if there is one, so that its errors reach
//     the terminal (or the journal, under the systemd unit);
//  2. unless in the foreground, fork before anything starts a thread; the
//     parent waits on a pipe and exits only when the child reports the
//     mount live (0) or failed (1, with the child's message on stderr);
//  3. open the client state and connect to the servers (recovering a
//     pending eviction), open the metadata and free crash orphans;
//  4. create the FUSE session, mount, open the control socket
//     (control_socket.h: `s3oram status` asks the mount), report success,
//     detach stdio;
//  5. serve with the multi-threaded loop until unmount or SIGTERM/SIGINT/
//     SIGHUP; `destroy` writes back every cached block and syncs;
//  6. back the client state up to the servers (oramcore/protocol/state_backup.h).
// Once mounted, nothing is written to stderr (logs go to log_file, syslog,
// or the journal when stderr is the journal).
#include <fcntl.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <syslog.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fused/block_cache.h"
#include "fused/block_engine.h"
#include "fused/control_socket.h"
#include "fused/file_data.h"
#include "fused/filesystem.h"
#include "fused/metadata_store.h"
#include "fused/mount_options.h"
#include "fused/status_report.h"
#include "oramcore/base/logging.h"
#include "oramcore/base/no_core_dumps.h"
#include "oramcore/crypto/passphrase.h"
#include "oramcore/protocol/client.h"
#include "oramcore/protocol/state_backup.h"

namespace {

using s3oram::Status;
namespace fs = s3oram::fs;

constexpr const char* kProgram = "s3oramfs-fused";
constexpr double kAttrTimeoutSeconds = 1.0;
// How often an idle mount tells the servers it is alive.
constexpr std::chrono::seconds kLeaseKeepAlive{10};

// Reports the start-up outcome to the waiting parent (or to stderr in the
// foreground). Messages are for the user's terminal. Over the pipe, a
// notice is "2" + one line + "\n"; the outcome is "0" (mounted) or "1" +
// the message, and ends the stream.
class StartupReporter {
 public:
  explicit StartupReporter(int fd) : fd_(fd) {}
  // What a slow start waits for ("server 0 is finishing eviction 26 ...");
  // nothing once the start is over.
  void Notice(const std::string& message) {
    if (done_) return;
    if (fd_ < 0) {
      std::fprintf(stderr, "%s: %s\n", kProgram, message.c_str());
      return;
    }
    std::string m = "2" + message;
    std::replace(m.begin(), m.end(), '\n', ' ');
    m += '\n';
    (void)!write(fd_, m.data(), m.size());
  }
  void Fail(const std::string& message) {
    done_ = true;
    if (fd_ >= 0) {
      std::string m = "1" + message;
      (void)!write(fd_, m.data(), m.size());
      close(fd_);
      fd_ = -1;
    } else {
      std::fprintf(stderr, "%s: %s\n", kProgram, message.c_str());
    }
  }
  void Succeed() {
    done_ = true;
    if (fd_ >= 0) {
      (void)!write(fd_, "0", 1);
      close(fd_);
      fd_ = -1;
    }
  }

 private:
  int fd_;
  bool done_ = false;
};

void SetupLogging(const fs::MountCommand& cmd) {
  const auto level = spdlog::level::from_str(cmd.log_level);
  if (!cmd.log_file.empty()) {
    auto logger = spdlog::basic_logger_mt("fused", cmd.log_file);
    s3oram::logging::Install(logger, false, kProgram, level);
    spdlog::flush_on(spdlog::level::trace);
    return;
  }
  if (cmd.foreground && (cmd.debug || s3oram::logging::StderrIsJournal())) {
    s3oram::logging::Install(spdlog::stderr_logger_mt("fused"),
                             s3oram::logging::StderrIsJournal(), kProgram, level);
    return;
  }
  auto logger = spdlog::syslog_logger_mt("fused", kProgram, LOG_PID, LOG_DAEMON);
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%v");
  spdlog::set_level(level);
}

// Absolute (the daemon changes to / after forking); files that do not exist
// yet (a new log file) are resolved against the working directory.
std::string Absolute(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) != nullptr) return buf;
  if (!path.empty() && path[0] == '/') return path;
  if (getcwd(buf, sizeof buf) == nullptr) return path;
  return std::string(buf) + "/" + path;
}

void DetachStdio() {
  int null = open("/dev/null", O_RDWR);
  if (null < 0) return;
  dup2(null, STDIN_FILENO);
  dup2(null, STDOUT_FILENO);
  dup2(null, STDERR_FILENO);
  if (null > STDERR_FILENO) close(null);
}

// The parent side of the fork: prints the child's notices as they come and
// waits for its verdict.
int WaitForChild(int fd, pid_t child) {
  // "0" means mounted: return at once (a process the child started may
  // still hold the pipe open). "1" is read to the end.
  std::string msg;
  char buf[512];
  for (;;) {
    // Complete notices first: "2" + line + "\n".
    while (!msg.empty() && msg[0] == '2') {
      const auto end = msg.find('\n');
      if (end == std::string::npos) break;
      std::fprintf(stderr, "%s: %s\n", kProgram, msg.substr(1, end - 1).c_str());
      msg.erase(0, end + 1);
    }
    if (!msg.empty() && msg[0] == '0') break;
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      msg.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  close(fd);
  if (!msg.empty() && msg[0] == '0') return 0;
  int status = 0;
  waitpid(child, &status, 0);
  if (msg.size() > 1 && msg[0] == '1') {
    std::fprintf(stderr, "%s: %s\n", kProgram, msg.c_str() + 1);
  } else {
    std::fprintf(stderr, "%s: the daemon exited during start-up\n", kProgram);
  }
  return 1;
}

// The request and eviction timeouts of the mount options, and the lease
// taken for this mount.
s3oram::ClientOptions MountClientOptions(const fs::MountCommand& cmd) {
  s3oram::ClientOptions options;
  options.requests.deadline = std::chrono::seconds(cmd.timeout_seconds);
  options.requests.resend_after = std::min<std::chrono::milliseconds>(
      std::chrono::seconds(2), options.requests.deadline);
  options.evictions.deadline = std::chrono::seconds(cmd.evict_timeout_seconds);
  options.evictions.resend_after = std::min<std::chrono::milliseconds>(
      std::chrono::seconds(60), options.evictions.deadline);
  options.force_lease = cmd.force;
  options.lease_purpose = "mounted on " + cmd.mountpoint;
  return options;
}

// Opens the client (fetching a newer state first under -o refresh_state) and
// zeroes the passphrase once it is no longer needed. Null once the failure
// has been reported.
std::unique_ptr<s3oram::OramClient> OpenClient(const fs::MountCommand& cmd,
                                               s3oram::Secret& passphrase,
                                               StartupReporter& reporter) {
  const std::string& state = cmd.state;
  s3oram::ClientOptions options = MountClientOptions(cmd);
  options.on_wait = [&reporter](const std::string& what) { reporter.Notice(what); };
  auto client = s3oram::OramClient::Open(state, passphrase, options);
  if (!client.ok() && client.status().code() == s3oram::Status::Code::kStaleState &&
      cmd.refresh_state) {
    // Another device mounted since and left its state on the servers at its
    // unmount: fetch it, then open that.
    spdlog::warn("{}: {}; -o refresh_state: fetching the newest state backup from the servers",
                 state, client.status().message());
    auto refreshed = s3oram::RefreshState(state, passphrase, options.requests.deadline);
    if (!refreshed.ok()) {
      reporter.Fail("cannot refresh " + state +
                    " (-o refresh_state): " + refreshed.status().ToString());
      return nullptr;
    }
    for (const auto& w : refreshed->warnings) spdlog::warn("refresh_state: {}", w);
    spdlog::info("refreshed {} from state backup generation {} (taken at unix time {})", state,
                 refreshed->generation, refreshed->created_unix);
    client = s3oram::OramClient::Open(state, passphrase, options);
  } else if (client.ok() && cmd.refresh_state) {
    spdlog::info(
        "-o refresh_state: {} is current (no other device mounted since); nothing to "
        "fetch",
        state);
  }
  passphrase = s3oram::Secret();  // zeroed: the client keeps the master key, guarded
  if (!client.ok()) {
    reporter.Fail("cannot open " + state + ": " + client.status().ToString());
    return nullptr;
  }
  return std::move(client).value();
}

// Opens the metadata database inside the state and frees the files a crash
// left unlinked but not yet freed. Null once the failure has been reported.
std::unique_ptr<fs::MetadataStore> OpenMetadata(s3oram::OramClient& client,
                                                const std::string& state,
                                                StartupReporter& reporter) {
  const auto& params = client.params();
  auto meta = fs::MetadataStore::Open(client.unlocked_state(), params.capacity_blocks,
                                      static_cast<std::uint32_t>(params.block_bytes));
  if (!meta.ok()) {
    reporter.Fail("cannot open the filesystem metadata in " + state + ": " +
                  meta.status().ToString());
    return nullptr;
  }
  std::uint64_t purged = 0;
  if (int e = (*meta)->PurgeOrphans(&purged); e != 0) {
    reporter.Fail("cannot free unlinked files left by a crash: " + (*meta)->last_error());
    return nullptr;
  }
  if (purged > 0) spdlog::info("freed {} unlinked files left by an earlier crash", purged);
  return std::move(meta).value();
}

// Creates the FUSE session from the mount's FUSE arguments (argv_storage
// must outlive the session) and mounts it. Null once the failure has been
// reported.
fuse_session* MountSession(const fs::MountCommand& cmd, std::vector<std::string>& argv_storage,
                           fs::Filesystem& filesystem, StartupReporter& reporter) {
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  fuse_session* se = fuse_session_new(&args, &fs::Filesystem::Operations(),
                                      sizeof(fuse_lowlevel_ops), &filesystem);
  // fuse_session_new may have rebuilt args in memory of its own.
  fuse_opt_free_args(&args);
  if (se == nullptr) {
    reporter.Fail("cannot create the FUSE session (bad options?)");
    return nullptr;
  }
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    reporter.Fail("cannot install signal handlers");
    return nullptr;
  }
  if (fuse_session_mount(se, cmd.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    reporter.Fail("cannot mount on " + cmd.mountpoint +
                  " (does it exist, and is nothing, not even a dead s3oramfs, mounted there?)");
    return nullptr;
  }
  return se;
}

// Keeps the lease's "last active" fresh while the mount is idle, so a
// refused second client can tell a live holder from a dead one, and notices
// a takeover even when nothing is being accessed. On the same beat it asks
// each excluded server whether it is back, and catches up those that are
// (OramBlockEngine::CatchUpExcluded).
class LeaseKeepAlive {
 public:
  explicit LeaseKeepAlive(fs::OramBlockEngine& engine)
      : engine_(engine), thread_([this, &engine] {
          std::unique_lock<std::mutex> lock(mu_);
          while (!cv_.wait_for(lock, kLeaseKeepAlive, [&] { return stopping_; })) {
            lock.unlock();
            Status st = engine.KeepAlive(kLeaseKeepAlive);
            // An excluded server that is back is caught up from here.
            if (st.code() != s3oram::Status::Code::kLeaseHeld) engine.CatchUpExcluded();
            lock.lock();
            if (st.code() == s3oram::Status::Code::kLeaseHeld)
              break;  // fenced: nothing more to renew
          }
        }) {}

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    // A catch-up under way goes to its last pass now (the unmount waits for
    // that pass, not for the rest of the copy).
    engine_.HurryCatchUp();
    thread_.join();
  }

 private:
  fs::OramBlockEngine& engine_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the members it uses exist
};

// Serves until unmount or a signal; the loop's result, an aborted
// connection counted as an unmount.
int RunFuseLoop(const fs::MountCommand& cmd, fuse_session* se) {
  int rc = 0;
  if (cmd.single_thread) {
    rc = fuse_session_loop(se);
  } else {
    fuse_loop_config* config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_clone_fd(config, 0);
    fuse_loop_cfg_set_idle_threads(config, 10);
    rc = fuse_session_loop_mt(se, config);
    fuse_loop_cfg_destroy(config);
  }
  sd_notify(0, "STOPPING=1");
  spdlog::info("unmounting {} (loop ended with {})", cmd.mountpoint, rc);
  if (rc == -ECONNABORTED) {
    // The kernel ended the connection as aborted rather than unmounted
    // (seen, rarely, racing a plain `fusermount3 -u`; also what an abort
    // through /sys/fs/fuse/connections gives). Nothing of this daemon's is
    // lost: everything below is written back as for an unmount, and the
    // exit status says whether that succeeded.
    spdlog::warn("the kernel aborted the FUSE connection of {}; writing back and stopping as "
                 "for an unmount",
                 cmd.mountpoint);
    rc = 0;
  }
  return rc;
}

// The mount's answers on its control socket. "status <timeout ms>": the
// text `s3oram status` prints, from the client's state as of its latest call
// (no wait for the access or eviction under way) and one round of quick reads
// to every server on the probe's own connections.
class ControlAnswers {
 public:
  ControlAnswers(const fs::MountCommand& cmd, fs::OramBlockEngine& engine,
                 std::unique_ptr<s3oram::StatusProbe> probe)
      : cmd_(cmd), engine_(engine), probe_(std::move(probe)), since_(std::time(nullptr)) {}

  fs::ControlAnswer operator()(const std::string& request) {
    constexpr std::string_view kStatus = "status ";
    long long timeout_ms = 0;
    const char* first = request.data() + kStatus.size();
    const char* last = request.data() + request.size();
    if (request.size() <= kStatus.size() || request.compare(0, kStatus.size(), kStatus) != 0 ||
        std::from_chars(first, last, timeout_ms).ptr != last || timeout_ms < 1) {
      return {2, "unknown request (this mount answers \"status <timeout ms>\")\n"};
    }
    // An unmount waits for the round under way: bounded here, whatever was asked.
    timeout_ms = std::min(timeout_ms, kMaxTimeoutMs);
    s3oram::OramClient::Snapshot client = engine_.snapshot();
    client.down = engine_.servers_down();  // live, not as of the latest call
    const auto busy_since = engine_.busy_since();
    const std::uint64_t waiting = engine_.waiters();
    const s3oram::ServerViews servers = probe_->Ask(std::chrono::milliseconds(timeout_ms));
    fs::StatusReport report = fs::RenderStatus(client, servers, /*live_mount=*/true);
    char since[32] = "?";
    std::tm tm{};
    if (::gmtime_r(&since_, &tm) != nullptr) {
      std::strftime(since, sizeof since, "%Y-%m-%d %H:%M UTC", &tm);
    }
    std::string head = "mount       " + cmd_.mountpoint + " (s3oramfs-fused pid " +
                       std::to_string(::getpid()) + ", since " + since +
                       "): answered by the mount, no passphrase asked; the client's counters "
                       "are as of its latest finished call\n";
    if (busy_since) {
      char line[160];
      std::snprintf(
          line, sizeof line,
          "oram        a call under way for %.1f s (an access, a batch, a sync or the "
          "eviction it runs), %llu more waiting\n",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - *busy_since).count(),
          static_cast<unsigned long long>(waiting));
      head += line;
    }
    return {report.unreachable ? 1 : 0, head + report.text};
  }

 private:
  static constexpr long long kMaxTimeoutMs = 10000;
  const fs::MountCommand& cmd_;
  fs::OramBlockEngine& engine_;
  std::unique_ptr<s3oram::StatusProbe> probe_;
  const std::time_t since_;
};

// The control socket, or null (logged) where it cannot be made: the mount
// works without it, and `s3oram status` then opens the state itself.
std::unique_ptr<fs::ControlServer> StartControlSocket(const fs::MountCommand& cmd,
                                                      fs::OramBlockEngine& engine) {
  auto probe = engine.OpenStatusProbe();
  if (!probe.ok()) {
    spdlog::warn("no control socket (s3oram status will ask for the passphrase): {}",
                 probe.status().ToString());
    return nullptr;
  }
  auto answers = std::make_shared<ControlAnswers>(cmd, engine, std::move(probe).value());
  auto server = fs::ControlServer::Start(
      cmd.state, [answers](const std::string& request) { return (*answers)(request); });
  if (!server.ok()) {
    spdlog::warn("no control socket (s3oram status will ask for the passphrase): {}",
                 server.status().ToString());
    return nullptr;
  }
  spdlog::info("control socket {}: s3oram status -s {} asks this mount", (*server)->path(),
               cmd.state);
  return std::move(server).value();
}

void LogStats(const fs::BlockCache& cache, const fs::OramBlockEngine& engine) {
  const auto cs = cache.stats();
  const auto es = engine.stats();
  spdlog::info(
      "cache: {} hits, {} loads ({} readahead), {} write-backs ({} of partly written "
      "blocks), {} failures; ORAM: {} reads, {} writes, {} updates",
      cs.hits, cs.loads, cs.prefetches, cs.writebacks, cs.updates, cs.failures, es.reads, es.writes,
      es.updates);
  if (auto ts = engine.ticker_stats()) {
    spdlog::info("constant rate: {} ticks, {} of them dummy accesses, {} with no access (servers "
                 "unreachable); shortest time between two ticks {:.1f} ms",
                 ts->ticks, ts->idle_ticks, ts->silent_ticks,
                 std::chrono::duration<double, std::milli>(ts->min_gap).count());
  }
}

// After the session is gone: the last write-back, the state backup and the
// lease. Returns the exit status.
int FinishUnmount(fs::BlockCache& cache, fs::OramBlockEngine& engine, const std::string& state,
                  int rc) {
  const bool flushed = cache.FlushAll() == 0;
  // Clean unmount: every block is written back and the state synced, so this
  // is the moment the state is worth backing up (still as the lease holder).
  // A failure loses only this backup (the previous generations stay on the
  // servers), so it is logged and the unmount still succeeds; `s3oram
  // backup-state` can be run by hand.
  if (flushed) {
    if (auto b = engine.BackupState(); b.ok()) {
      spdlog::info("client state backed up to the servers as generation {} ({} bytes, padded to {})",
                   b->generation, b->state_bytes, b->padded_bytes);
    } else {
      spdlog::error("unmount: backing up the client state to the servers FAILED: {}; the servers "
                    "keep the previous backup; run `s3oram backup-state -s {}` to retry",
                    b.status().ToString(), state);
    }
  }
  // The lease goes last: until every block is written back, this mount is
  // still the filesystem's writer.
  if (Status st = engine.Close(); !st.ok()) spdlog::warn("releasing the lease: {}", st.ToString());
  if (!flushed) return 1;
  return rc < 0 ? 1 : 0;
}

int Serve(const fs::MountCommand& cmd, s3oram::Secret passphrase, StartupReporter& reporter) {
  const std::string state = cmd.state;
  std::unique_ptr<s3oram::OramClient> client = OpenClient(cmd, passphrase, reporter);
  if (!client) return 1;
  const auto& params = client->params();
  std::unique_ptr<fs::MetadataStore> meta = OpenMetadata(*client, state, reporter);
  if (!meta) return 1;

  fs::MetadataStore& md = *meta;
  fs::OramBlockEngine engine(std::move(client), cmd.pipeline_accesses);
  if (cmd.constant_rate_ms != 0) {
    engine.EnableConstantRate(std::chrono::milliseconds(cmd.constant_rate_ms));
    spdlog::info("constant rate: one ORAM access every {} ms, a dummy one when nothing waits",
                 cmd.constant_rate_ms);
  }
  const std::size_t pages =
      static_cast<std::size_t>(cmd.cache_mib * (std::uint64_t{1} << 20) / engine.block_bytes());
  fs::InodeLocks locks;
  fs::BlockCache cache(engine, locks, pages, [&md](const std::vector<fs::WrittenExtent>& w) {
    return md.MarkWritten(w);
  });
  fs::FileData data(md, cache, engine, locks, std::chrono::seconds(cmd.writeback_delay_seconds),
                    cmd.readahead_blocks);
  fs::Filesystem filesystem(md, data, kAttrTimeoutSeconds);

  std::vector<std::string> argv_storage = cmd.fuse_args;
  fuse_session* se = MountSession(cmd, argv_storage, filesystem, reporter);
  if (se == nullptr) return 1;
  std::unique_ptr<fs::ControlServer> control = StartControlSocket(cmd, engine);
  spdlog::info(
      "mounted {} on {} ({} blocks of {} bytes, cache {} MiB, write-back delay {} s, "
      "readahead {} blocks, pipeline {} accesses)",
      state, cmd.mountpoint, params.capacity_blocks, params.block_bytes, cmd.cache_mib,
      cmd.writeback_delay_seconds, cmd.readahead_blocks, cmd.pipeline_accesses);
  reporter.Succeed();
  if (!cmd.foreground) DetachStdio();
  sd_notify(0, "READY=1");

  LeaseKeepAlive keepalive(engine);
  data.StartBackground();
  const int rc = RunFuseLoop(cmd, se);
  control.reset();  // the mount is ending: status opens the state again
  fuse_remove_signal_handlers(se);
  fuse_session_unmount(se);
  fuse_session_destroy(se);  // runs `destroy` if the kernel did not
  data.StopBackground();     // Destroy writes back whatever is left
  filesystem.Destroy();
  LogStats(cache, engine);
  keepalive.Stop();
  return FinishUnmount(cache, engine, state, rc);
}

}  // namespace

int main(int argc, char** argv) {
  bool config_error = false;
  auto parsed = fs::ParseMountCommand(argc, argv, &config_error);
  if (!parsed.ok()) {
    // A --config file's error names its file and line; the usage would bury it.
    std::fprintf(stderr, "%s: %s\n%s", kProgram, parsed.status().message().c_str(),
                 config_error ? "" : fs::UsageText(argv[0]).c_str());
    return 2;
  }
  fs::MountCommand cmd = std::move(parsed).value();
  if (cmd.show_help) {
    std::printf("%s", fs::UsageText(argv[0]).c_str());
    std::printf("FUSE options:\n");
    std::fflush(stdout);
    fuse_cmdline_help();
    fuse_lowlevel_help();
    return 0;
  }
  if (cmd.show_version) {
    std::printf("%s version 0.1.0 (libfuse %s)\n", kProgram, fuse_pkgversion());
    return 0;
  }
  if (cmd.fake) return 0;  // mount -f: pretend
  cmd.state = Absolute(cmd.state);
  cmd.mountpoint = Absolute(cmd.mountpoint);
  if (!cmd.log_file.empty()) cmd.log_file = Absolute(cmd.log_file);
  struct stat st;
  if (stat(cmd.state.c_str(), &st) != 0) {
    std::fprintf(stderr, "%s: cannot use state file %s: %s\n", kProgram, cmd.state.c_str(),
                 std::strerror(errno));
    return 1;
  }

  if (!cmd.passfile.empty()) cmd.passfile = Absolute(cmd.passfile);
  // From here on this process holds the passphrase, then the master key and
  // the decrypted state: no core dump of it, and no ptrace or /proc/PID/mem
  // by other processes of the same user, and a zero core limit for anything
  // it starts (docs/SECURITY.md, memory). Keys sit
  // in locked memory (Secret); the rest of the heap can still be swapped.
  if (auto forbidden = s3oram::ForbidCoreDumps(); !forbidden.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, forbidden.ToString().c_str());
    return 1;
  }
  // Before forking: the prompt needs the terminal, and the environment
  // variable is wiped from this process before the daemon runs.
  auto passphrase = s3oram::ReadPassphrase(s3oram::PassphraseSource{cmd.passfile},
                                           "Passphrase for " + cmd.state + ": ");
  if (!passphrase.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, passphrase.status().ToString().c_str());
    return 1;
  }

  int report_fd = -1;
  if (!cmd.foreground) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      std::perror("pipe");
      return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid > 0) {
      close(fds[1]);
      return WaitForChild(fds[0], pid);
    }
    close(fds[0]);
    report_fd = fds[1];
    setsid();
    if (chdir("/") != 0) {
      // Paths are absolute already; nothing depends on the working directory.
    }
  }
  StartupReporter reporter(report_fd);
  try {
    SetupLogging(cmd);
  } catch (const spdlog::spdlog_ex& e) {
    reporter.Fail(std::string("cannot set up logging: ") + e.what());
    return 1;
  }
  int rc = Serve(cmd, std::move(passphrase).value(), reporter);
  spdlog::shutdown();
  return rc;
}

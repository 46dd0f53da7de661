// s3oram-serverd: one S3ORAM storage server (man 8 s3oram-serverd).
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "serverd/config.h"
#include "serverd/server.h"

namespace {

std::atomic<bool> g_stop{false};

extern "C" void OnSignal(int) { g_stop.store(true); }

// Under systemd (stderr connected to the journal) the journal adds timestamps and
// reads "<N>" priority prefixes; elsewhere we print our own timestamps.
bool StderrIsJournal() {
  const char* js = std::getenv("JOURNAL_STREAM");
  if (!js) return false;
  unsigned long dev = 0, ino = 0;
  if (std::sscanf(js, "%lu:%lu", &dev, &ino) != 2) return false;
  struct stat st;
  if (fstat(STDERR_FILENO, &st) != 0) return false;
  return st.st_dev == dev && st.st_ino == ino;
}

// sd-daemon(3) priority prefix for each spdlog level.
class JournalPriority : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static constexpr const char* kPrefix[] = {"<7>", "<7>", "<6>", "<4>", "<3>", "<2>", "<6>"};
    const char* p = kPrefix[static_cast<int>(msg.level)];
    dest.append(p, p + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JournalPriority>();
  }
};

void SetupLogging(const std::string& level) {
  auto logger = spdlog::stderr_logger_mt("serverd");
  spdlog::set_default_logger(logger);
  if (StderrIsJournal()) {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<JournalPriority>('*').set_pattern("%*%v");
    spdlog::set_formatter(std::move(formatter));
  } else {
    spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e s3oram-serverd[%P] %l: %v");
  }
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"s3oram-serverd: an S3ORAM storage server holding one Shamir share of the tree"};
  std::string config_path;
  app.add_option("-c,--config", config_path, "server configuration (TOML)")->required();
  std::string log_level;
  app.add_option("--log-level", log_level, "override the configured log level");
  CLI11_PARSE(app, argc, argv);

  auto config = s3oram::serverd::LoadServerConfig(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "s3oram-serverd: %s\n", config.status().ToString().c_str());
    return 2;
  }
  if (!log_level.empty()) config->log_level = log_level;
  SetupLogging(config->log_level);

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  s3oram::serverd::Server server(std::move(config).value());
  if (auto st = server.Start(); !st.ok()) {
    spdlog::error("cannot start: {}", st.ToString());
    return 1;
  }
  sd_notify(0, "READY=1\nSTATUS=serving");
  auto st = server.Run(g_stop);
  sd_notify(0, "STOPPING=1");
  if (!st.ok()) {
    spdlog::error("stopped on error: {}", st.ToString());
    return 1;
  }
  return 0;
}

// s3oram-serverd: one S3ORAM storage server (man 8 s3oram-serverd).
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

#include "oramcore/base/logging.h"
#include "serverd/config.h"
#include "serverd/server.h"

namespace {

std::atomic<bool> g_stop{false};

extern "C" void OnSignal(int) { g_stop.store(true); }

void SetupLogging(const std::string& level) {
  s3oram::logging::Install(spdlog::stderr_logger_mt("serverd"), s3oram::logging::StderrIsJournal(),
                           "s3oram-serverd", spdlog::level::from_str(level));
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

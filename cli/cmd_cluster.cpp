// s3oram cluster start|stop: three local servers for demos and tests.
#include <cstdio>

#include "cli/commands.h"
#include "cli/local_cluster.h"

namespace s3oram::cli {

void RegisterCluster(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("cluster", "start or stop s3oram-serverd processes on 127.0.0.1");
  cmd->require_subcommand(1);
  auto opts = std::make_shared<cluster::LocalClusterOptions>();
  auto* start = cmd->add_subcommand("start", "start the servers (they keep running)");
  start->add_option("-d,--dir", opts->dir, "cluster directory (configs, data, logs)")->required();
  start->add_option("--servers", opts->servers, "number of servers")->capture_default_str()
      ->check(CLI::Range(3, 16));
  start->add_option("--base-port", opts->base_port, "first of 2n consecutive ports (default: free ones)");
  start->add_option("--serverd", opts->serverd_path, "s3oram-serverd binary");
  start->add_option("--log-level", opts->log_level,
                    "the servers' log level: trace, debug, info, warn, error")
      ->capture_default_str();
  auto no_sync = std::make_shared<bool>(false);
  start->add_flag("--no-sync", *no_sync, "servers do not fdatasync (faster, not crash safe)");
  start->callback([opts, no_sync, exit_code] {
    opts->tie_to_parent = false;
    opts->sync = !*no_sync;
    auto c = cluster::LocalCluster::Start(*opts);
    if (!c.ok()) {
      std::fprintf(stderr, "s3oram cluster start: %s\n", c.status().ToString().c_str());
      *exit_code = 1;
      return;
    }
    (*c)->Detach();
    for (std::size_t i = 0; i < (*c)->endpoints().size(); ++i) {
      std::printf("server %zu: %s (pid %d, log %s)\n", i, (*c)->endpoints()[i].c_str(),
                  static_cast<int>((*c)->pid(i)), (*c)->log_path(i).c_str());
    }
    // Everything `s3oram init` needs to reach these servers, on one line.
    // Keys are given as .pub files: Z85 text has shell metacharacters.
    std::printf("servers:");
    for (std::size_t i = 0; i < (*c)->endpoints().size(); ++i) {
      std::printf(" --server %s --server-key %s", (*c)->endpoints()[i].c_str(),
                  (*c)->server_public_key_file(i).c_str());
    }
    std::printf(" --client-key %s\n", (*c)->client_key_file().c_str());
  });
  auto stop_dir = std::make_shared<std::string>();
  auto* stop = cmd->add_subcommand("stop", "stop the servers a `cluster start` left running");
  stop->add_option("-d,--dir", *stop_dir, "cluster directory")->required();
  stop->callback([stop_dir, exit_code] {
    if (auto st = cluster::LocalCluster::StopDir(*stop_dir); !st.ok()) {
      std::fprintf(stderr, "s3oram cluster stop: %s\n", st.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace s3oram::cli

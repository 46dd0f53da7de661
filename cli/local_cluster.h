// A local cluster: ℓ s3oram-serverd processes on 127.0.0.1 with generated
// configurations, for the demo, the tests and the benchmarks.
//
// Layout of dir: server-<i>.toml, data-<i>/, server-<i>.log, server-<i>.pid,
// server-<i>.key/.pub (CURVE keypairs), client.key/.pub (the local client's).
// Only processes this cluster started are ever signalled: by the PIDs it
// recorded, and (for StopDir, across invocations) only after checking that the
// PID still runs s3oram-serverd with this cluster's config file.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "oramcore/base/status.h"

namespace s3oram::cluster {

struct LocalClusterOptions {
  std::string dir;                // created if missing
  std::size_t servers = 3;
  std::uint16_t base_port = 0;    // 0: find 2 * servers free consecutive ports
  std::string serverd_path;       // empty: FindServerd()
  std::string log_level = "info";
  bool sync = true;               // servers fdatasync before acknowledging
  std::uint32_t threads = 0;      // kernel threads per server; 0 = cores / servers, at least 1
  std::uint32_t peer_timeout_ms = 30000;
  // Children get SIGTERM when this process dies (tests, bench). Off for
  // `s3oram cluster start`, whose servers outlive the command.
  bool tie_to_parent = true;
  // More client public keys the servers accept (besides the cluster's own
  // client key), e.g. a second client in a test.
  std::vector<std::string> extra_authorized_clients;
};

// s3oram-serverd to run: $S3ORAM_SERVERD, else next to this executable (or in
// the build tree's serverd/), else /usr/sbin/s3oram-serverd.
std::string FindServerd();

class LocalCluster {
 public:
  static Result<std::unique_ptr<LocalCluster>> Start(const LocalClusterOptions& options);
  // Stops every server it started (SIGTERM, then SIGKILL after 10 s).
  ~LocalCluster();

  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // CURVE: each server's public key (Z85), and the secret key file of the
  // client key every server accepts (DIR/client.key, public part client.pub).
  const std::vector<std::string>& server_public_keys() const { return server_keys_; }
  std::string server_public_key_file(std::size_t i) const;  // DIR/server-<i>.pub
  const std::string& client_key_file() const { return client_key_file_; }
  // The TOML configuration server i runs with (a test may rewrite it, then
  // Kill and Restart the server).
  std::string config_path(std::size_t i) const;
  const std::string& dir() const { return options_.dir; }
  pid_t pid(std::size_t i) const { return pids_.at(i); }
  std::string log_path(std::size_t i) const;

  // Sends sig to server i and, for SIGKILL/SIGTERM, reaps it (SIGKILL after
  // 10 s if it does not end); its wait status is then last_wait_status().
  Status Kill(std::size_t i, int sig);
  int last_wait_status() const { return last_wait_status_; }
  // Starts server i again (after Kill) with the same config and data;
  // extra_env ("NAME=value") is added to its environment (fault injection);
  // `binary`, if given, runs instead of the cluster's serverd (a test build).
  Status Restart(std::size_t i, const std::vector<std::string>& extra_env = {},
                 const std::string& binary = "");
  // True (and reaped) if server i is not running: it exited, crashed or was
  // killed. Restart brings it back.
  bool Exited(std::size_t i);
  Status Stop();

  // Stops the servers of a cluster started by another process (`cluster stop`).
  static Status StopDir(const std::string& dir);
  // Writes the pid files and detaches: the servers keep running after this
  // object is destroyed (used by `cluster start`).
  void Detach();

 private:
  LocalCluster() = default;
  static Result<std::unique_ptr<LocalCluster>> StartOnce(const LocalClusterOptions& options);
  Status Spawn(std::size_t i, const std::vector<std::string>& extra_env = {},
               const std::string& binary = "");
  Status WaitReady(std::size_t i);

  LocalClusterOptions options_;
  std::vector<std::string> endpoints_;
  std::vector<std::string> server_keys_;
  std::string client_key_file_;
  std::vector<std::uint16_t> ports_;  // client port i, peer port servers + i
  std::vector<pid_t> pids_;
  bool detached_ = false;
  int last_wait_status_ = 0;
};

}  // namespace s3oram::cluster

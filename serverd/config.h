// s3oram-serverd's configuration: a TOML file (man 5 s3oram-serverd.toml).
//
//   [server]
//   index = 0                              # party index 0..parties-1 (x = index + 1)
//   listen = "tcp://127.0.0.1:7300"        # client-facing ZeroMQ endpoint
//   peer_listen = "tcp://127.0.0.1:7310"   # endpoint the other servers connect to
//   data_dir = "/var/lib/s3oramfs/0"
//   threads = 0                            # kernel threads; 0 = one per core
//   eviction_nice = 10                     # evictions' CPU priority below accesses'
//   sync = true                            # fdatasync before acknowledging
//   peer_timeout_ms = 30000                # give up an eviction round after this
//   log_level = "info"                     # trace, debug, info, warn, error
//   secret_key_file = "/etc/s3oramfs/server-0.key"   # CURVE secret key (mode 0600)
//   authorized_clients = ["<40 Z85 chars>"]          # client public keys allowed in
//
//   [[peer]]
//   index = 1
//   endpoint = "tcp://127.0.0.1:7311"
//   public_key = "<40 Z85 chars>"          # the peer's CURVE public key
//
// Every link is CURVE-encrypted and authenticated: clients must present a key
// in authorized_clients, peers the public_key configured for them.
//
// Every field is validated (types, ranges, endpoint syntax, distinct indices,
// own index not among peers); unknown keys are errors, so typos do not pass.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "oramcore/base/status.h"

namespace s3oram::serverd {

struct PeerConfig {
  std::uint32_t index = 0;
  std::string endpoint;
  std::string public_key;  // Z85
  bool operator==(const PeerConfig&) const = default;
};

struct ServerConfig {
  std::uint32_t index = 0;
  std::string listen;
  std::string peer_listen;
  std::string data_dir;
  std::uint32_t threads = 0;
  // The nice increment of an eviction's threads (the PREPARE and its kernel
  // pool) over the threads that answer accesses: an eviction runs beside
  // the accesses of the next round, and on a host short of cores the
  // accesses then get the CPU first. 0: the same priority.
  std::uint32_t eviction_nice = 10;
  bool sync = true;
  std::uint32_t peer_timeout_ms = 30000;
  std::string log_level = "info";
  std::string secret_key_file;
  std::vector<std::string> authorized_clients;  // Z85 public keys
  std::vector<PeerConfig> peers;
  bool operator==(const ServerConfig&) const = default;
};

// origin names the source in error messages (a path, or "<string>").
Result<ServerConfig> ParseServerConfig(std::string_view toml_text, const std::string& origin);
Result<ServerConfig> LoadServerConfig(const std::string& path);
// TOML text that ParseServerConfig reads back to an equal config.
std::string RenderServerConfig(const ServerConfig& config);

}  // namespace s3oram::serverd

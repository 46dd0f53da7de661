// The FUSE client's configuration file (man 5 s3oramfs.toml), read by
// `s3oramfs-fused --config FILE`; the systemd user unit s3oramfs@NAME.service
// runs it on ~/.config/s3oramfs/NAME.toml.
//
//   [mount]
//   state = "/home/alice/vault.s3oram"     # required: the client state file
//   mountpoint = "/home/alice/vault"       # required
//   passfile = "/home/alice/.config/s3oramfs/vault.pass"  # optional, mode 0600;
//                                          # else $S3ORAM_PASSPHRASE
//   cache_size = 64                        # MiB (1..kMaxCacheMib)
//   writeback_delay = 5                    # seconds (0..kMaxWritebackDelaySeconds)
//   readahead = 8                          # blocks (0..kMaxReadaheadBlocks)
//   pipeline = 8                           # accesses sent together (1..kMaxPipelineAccesses)
//   constant_rate = 0                      # ms between accesses; 0: off (mount_options.h)
//   timeout = 30                           # seconds (1..kMaxTimeoutSeconds)
//   evict_timeout = 300                    # seconds (1..kMaxTimeoutSeconds)
//   log_level = "info"                     # trace, debug, info, warn, error
//   log_file = "/home/alice/.cache/s3oramfs/vault.log"   # optional
//   force = false                          # take the lease over
//   refresh_state = false                  # fetch a newer state another device left
//   fuse_options = ["allow_other"]         # extra libfuse -o options, one per element
//
// Guarantees: unknown tables and keys, wrong types, out-of-range values,
// relative paths (state, mountpoint, passfile, log_file must be absolute: the
// daemon runs from /), a missing [mount] table or required key are each an
// InvalidArgument of the form
//   <file>:<line>:<col>: <key path>: <what was expected>, got <what>
// (oramcore/base/toml_check.h; only an absent [mount] table has no line). Nothing
// here touches the filesystem except LoadClientConfig reading the file: that
// the paths exist is checked when they are used.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oramcore/base/status.h"

namespace s3oram::fs {

// What the file says. Optional keys that are absent stay empty/nullopt, so the
// daemon's own defaults (fused/mount_options.h) apply: they live in one place.
struct ClientConfig {
  std::string state;       // absolute
  std::string mountpoint;  // absolute
  std::string passfile;    // absolute, or empty
  std::optional<std::uint64_t> cache_mib;
  std::optional<std::uint32_t> writeback_delay_seconds;
  std::optional<std::uint32_t> readahead_blocks;
  std::optional<std::uint32_t> pipeline_accesses;
  std::optional<std::uint32_t> constant_rate_ms;  // 0 (off) or kMinConstantRateMs..kMaxConstantRateMs
  std::optional<std::uint32_t> timeout_seconds;
  std::optional<std::uint32_t> evict_timeout_seconds;
  std::optional<std::string> log_level;
  std::string log_file;    // absolute, or empty
  bool force = false;
  bool refresh_state = false;
  // Each element is one libfuse option (it may contain commas; whoever builds
  // an -o list escapes them). Never one of the daemon's own options.
  std::vector<std::string> fuse_options;
  bool operator==(const ClientConfig&) const = default;
};

// origin names the source in error messages (a path, or "<string>").
Result<ClientConfig> ParseClientConfig(std::string_view toml, const std::string& origin);
// Reads and parses `path`: NotFound if it does not exist, IoError if it cannot
// be read or is not a regular file, InvalidArgument if it is over 1 MiB or
// invalid. Every message names the path.
Result<ClientConfig> LoadClientConfig(const std::string& path);

}  // namespace s3oram::fs

// The command line of s3oramfs-fused, in its two roles:
//
//   s3oramfs-fused STATE MOUNTPOINT [-f] [-d] [-s] [-o OPT[,OPT...]]
//   s3oramfs-fused --config FILE [-f] [-d] [-s] [-o OPT[,OPT...]]
//   mount.s3oramfs STATE MOUNTPOINT [-sfnv] [-o OPTS] [-t TYPE]   (mount(8) helper)
//
// --config FILE (or --config=FILE; daemon role only) reads a client config
// file (fused/client_config.h): STATE and MOUNTPOINT come from it and may not
// be given as well; its other keys are applied first, so -o options on the
// command line override them; its fuse_options go to libfuse as -o options,
// before the command line's.
//
// The role comes from argv[0]: named mount.s3oramfs or mount.fuse.s3oramfs it
// follows mount(8)'s helper convention (-f means "fake", -n/-s/-v are
// accepted, and it always runs in the background). Both roles accept the
// daemon's own options (cache_size=MiB, writeback_delay=SECONDS,
// readahead=BLOCKS, pipeline=ACCESSES, constant_rate=MS, log_file=PATH, log_level=LEVEL, passfile=PATH, timeout, evict_timeout,
// force, refresh_state),
// drop the fstab-only options (_netdev, nofail, auto, noauto, user, nouser,
// users, defaults, x-*), and hand everything else to libfuse, adding
// subtype=s3oramfs, fsname=<STATE> and default_permissions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fused/mount_limits.h"
#include "oramcore/base/status.h"

namespace s3oram::fs {

enum class Invocation { kDaemon, kMountHelper };

struct MountCommand {
  Invocation invocation = Invocation::kDaemon;
  std::string state;       // the client state file (mount's "source")
  std::string mountpoint;
  std::string config_file; // --config FILE as given, or empty
  // What remains for fuse_session_new: argv[0] then options.
  std::vector<std::string> fuse_args;
  bool foreground = false;
  bool debug = false;
  bool single_thread = false;
  bool fake = false;       // helper -f: parse, then do nothing
  bool verbose = false;    // helper -v
  bool show_help = false;
  bool show_version = false;
  std::uint64_t cache_mib = 64;
  // How long written data may wait in the cache after the last write to its
  // block before the background flusher writes it back; 0 writes a file's
  // data back when it is closed. fsync, fsyncdir and unmount always write
  // back at once.
  std::uint32_t writeback_delay_seconds = 5;
  // ORAM blocks a sequential reader's next reads will need, fetched in the
  // background while it consumes the current one (0: none).
  std::uint32_t readahead_blocks = 8;
  // ORAM accesses of a flush, a write-back or a readahead sent together
  // (pipelined; 1: one at a time).
  std::uint32_t pipeline_accesses = kMaxPipelineAccesses;
  // Constant-rate mode: exactly one ORAM access every this many
  // milliseconds, a dummy one when nothing waits (fused/access_ticker.h);
  // 0: off (accesses go when the filesystem needs them).
  std::uint32_t constant_rate_ms = 0;
  std::string log_file;
  std::string log_level = "info";
  std::string passfile;    // empty: $S3ORAM_PASSPHRASE or a terminal prompt
  bool force = false;      // take the single-writer lease over from another client
  // When the state is stale (another device mounted since), replace it with
  // the newest state backup on the servers before mounting.
  bool refresh_state = false;
  // An ORAM request (an eviction) that gets no answer for this long fails
  // with EIO instead of blocking the filesystem.
  std::uint32_t timeout_seconds = 30;
  std::uint32_t evict_timeout_seconds = 300;
};

Invocation InvocationFromArgv0(std::string_view argv0);

// Parses argv; InvalidArgument with a message fit for the user on error.
// With show_help/show_version set, the other fields may be incomplete (and a
// --config file is not read). With --config the file is read here: its errors
// (LoadClientConfig's) name the file, line and key, and *config_error (if
// given) is set for them: the usage text would not help there.
Result<MountCommand> ParseMountCommand(int argc, const char* const* argv,
                                       bool* config_error = nullptr);

// `value` escaped for a -o option list (libfuse splits at unescaped commas).
std::string EscapeOptionValue(std::string_view value);

// Usage text of this program (the libfuse option help follows it).
std::string UsageText(std::string_view program);

}  // namespace s3oram::fs

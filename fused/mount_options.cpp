#include "fused/mount_options.h"

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <fuse_opt.h>

#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "fused/client_config.h"

namespace s3oram::fs {
namespace {

// Filled by fuse_opt_parse: our own -o options and the positional arguments.
struct RawOptions {
  char* cache_size = nullptr;
  char* writeback_delay = nullptr;
  char* readahead = nullptr;
  char* pipeline = nullptr;
  char* constant_rate = nullptr;
  char* log_file = nullptr;
  char* log_level = nullptr;
  char* passfile = nullptr;
  char* timeout = nullptr;
  char* evict_timeout = nullptr;
  int force = 0;
  int refresh_state = 0;
  int nonopts = 0;
  bool from_config = false;  // STATE and MOUNTPOINT come from --config
  std::string* state = nullptr;
  std::string* error = nullptr;

  RawOptions() = default;
  RawOptions(const RawOptions&) = delete;
  RawOptions& operator=(const RawOptions&) = delete;
  // fuse_opt_parse strdup()s each value (freeing one given twice).
  ~RawOptions() {
    std::free(cache_size);
    std::free(writeback_delay);
    std::free(readahead);
    std::free(pipeline);
    std::free(constant_rate);
    std::free(log_file);
    std::free(log_level);
    std::free(passfile);
    std::free(timeout);
    std::free(evict_timeout);
  }
};

enum { kKeyDiscard = 100 };

const fuse_opt kOptionSpec[] = {
    {"cache_size=%s", offsetof(RawOptions, cache_size), 0},
    {"writeback_delay=%s", offsetof(RawOptions, writeback_delay), 0},
    {"readahead=%s", offsetof(RawOptions, readahead), 0},
    {"pipeline=%s", offsetof(RawOptions, pipeline), 0},
    {"constant_rate=%s", offsetof(RawOptions, constant_rate), 0},
    {"log_file=%s", offsetof(RawOptions, log_file), 0},
    {"log_level=%s", offsetof(RawOptions, log_level), 0},
    {"passfile=%s", offsetof(RawOptions, passfile), 0},
    {"timeout=%s", offsetof(RawOptions, timeout), 0},
    {"evict_timeout=%s", offsetof(RawOptions, evict_timeout), 0},
    {"force", offsetof(RawOptions, force), 1},
    {"--force", offsetof(RawOptions, force), 1},
    {"refresh_state", offsetof(RawOptions, refresh_state), 1},
    FUSE_OPT_KEY("_netdev", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("nofail", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("auto", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("noauto", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("user", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("nouser", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("users", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("defaults", FUSE_OPT_KEY_DISCARD),
    // We set these ourselves.
    FUSE_OPT_KEY("subtype=", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("default_permissions", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_END,
};

int ProcessOption(void* data, const char* arg, int key, fuse_args*) {
  auto* raw = static_cast<RawOptions*>(data);
  if (key == FUSE_OPT_KEY_NONOPT) {
    if (raw->from_config) {
      *raw->error = std::string("unexpected argument '") + arg +
                    "': with --config, STATE and MOUNTPOINT come from the config file";
      return -1;
    }
    ++raw->nonopts;
    if (raw->nonopts == 1) {
      *raw->state = arg;
      return 0;  // consumed: the source is ours
    }
    if (raw->nonopts == 2) return 1;  // the mountpoint, for fuse_parse_cmdline
    *raw->error = std::string("unexpected argument '") + arg + "'";
    return -1;
  }
  if (key == FUSE_OPT_KEY_OPT && std::strncmp(arg, "x-", 2) == 0) return 0;  // fstab/systemd
  return 1;
}

struct FuseArgsDeleter {
  void operator()(fuse_args* a) const {
    fuse_opt_free_args(a);
    delete a;
  }
};

// mount(8) runs helpers as `mount.TYPE SPEC DIR [-sfnv] [-N NS] [-o OPTS] [-t TYPE]`;
// turn that into the daemon's own argv.
Result<std::vector<std::string>> TranslateHelperArgs(int argc, const char* const* argv,
                                                     MountCommand* cmd) {
  std::vector<std::string> out{argv[0]};
  std::vector<std::string> options;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-o" || a == "-t" || a == "-N") {
      if (i + 1 >= argc) return Status::InvalidArgument("option " + std::string(a) + " needs a value");
      std::string_view v = argv[++i];
      if (a == "-o") options.emplace_back(v);
      if (a == "-N") return Status::InvalidArgument("mount namespaces (-N) are not supported");
      continue;
    }
    if (a.starts_with("-o")) {
      options.emplace_back(a.substr(2));
      continue;
    }
    if (a.starts_with("-t")) continue;
    if (a.starts_with("--config")) {
      return Status::InvalidArgument(
          "--config is an option of s3oramfs-fused, not of the mount helper (mount -t s3oramfs "
          "takes STATE and MOUNTPOINT)");
    }
    if (a == "-h" || a == "--help") {
      cmd->show_help = true;
      continue;
    }
    if (a.starts_with("-") && a.size() > 1) {
      for (char c : a.substr(1)) {
        switch (c) {
          case 'f': cmd->fake = true; break;
          case 'v': cmd->verbose = true; break;
          case 's':  // sloppy: unknown options are errors anyway
          case 'n':  // no mtab: there is none
            break;
          default:
            return Status::InvalidArgument(std::string("unknown mount helper flag -") + c);
        }
      }
      continue;
    }
    positional.emplace_back(a);
  }
  for (auto& p : positional) out.push_back(std::move(p));
  for (auto& o : options) {
    out.emplace_back("-o");
    out.push_back(std::move(o));
  }
  return out;
}

// Takes `--config FILE` / `--config=FILE` out of the daemon's argv (into
// *config) and says whether help or the version was asked for, in which case
// the file is not read. Arguments of -o and everything after "--" are not
// looked at: they are option values and positional arguments.
Result<std::vector<std::string>> ExtractConfigOption(int argc, const char* const* argv,
                                                     std::string* config, bool* informational) {
  std::vector<std::string> out{argv[0]};
  bool given = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") {
      out.insert(out.end(), argv + i, argv + argc);
      break;
    }
    if (a == "-o" && i + 1 < argc) {
      out.emplace_back(a);
      out.emplace_back(argv[++i]);
      continue;
    }
    if (a == "--config" || a.starts_with("--config=")) {
      if (given) return Status::InvalidArgument("--config given more than once");
      given = true;
      if (a == "--config") {
        if (i + 1 >= argc) return Status::InvalidArgument("--config needs a FILE");
        *config = argv[++i];
      } else {
        *config = std::string(a.substr(std::string_view("--config=").size()));
      }
      if (config->empty()) return Status::InvalidArgument("--config needs a FILE, got ''");
      continue;
    }
    if (a == "-h" || a == "--help" || a == "-V" || a == "--version") *informational = true;
    out.emplace_back(a);
  }
  return out;
}

// An option's value as a whole number in [min, max]; `unit` names what it
// counts in the message.
Status WholeNumber(const char* name, const char* text, std::uint64_t min, std::uint64_t max,
                   const char* unit, std::uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v < min || v > max) {
    return Status::InvalidArgument(std::string(name) + " must be a whole number of " + unit +
                                   " in " + std::to_string(min) + ".." + std::to_string(max) +
                                   ", not '" + text + "'");
  }
  *out = v;
  return Status::Ok();
}

// The file's values are the starting point; the command-line options parsed
// later replace each one they name (the readers assign only what was given).
void ApplyConfig(const ClientConfig& config, MountCommand* cmd,
                 std::vector<std::string>* normalized) {
  cmd->state = config.state;
  cmd->mountpoint = config.mountpoint;
  cmd->passfile = config.passfile;
  cmd->log_file = config.log_file;
  cmd->force = config.force;
  cmd->refresh_state = config.refresh_state;
  if (config.cache_mib) cmd->cache_mib = *config.cache_mib;
  if (config.writeback_delay_seconds) {
    cmd->writeback_delay_seconds = *config.writeback_delay_seconds;
  }
  if (config.readahead_blocks) cmd->readahead_blocks = *config.readahead_blocks;
  if (config.pipeline_accesses) cmd->pipeline_accesses = *config.pipeline_accesses;
  if (config.constant_rate_ms) cmd->constant_rate_ms = *config.constant_rate_ms;
  if (config.timeout_seconds) cmd->timeout_seconds = *config.timeout_seconds;
  if (config.evict_timeout_seconds) cmd->evict_timeout_seconds = *config.evict_timeout_seconds;
  if (config.log_level) cmd->log_level = *config.log_level;
  // Right after argv[0]: libfuse lets a later -o option win, so the
  // command line's come after these.
  std::vector<std::string> fuse_opts;
  for (const auto& o : config.fuse_options) {
    fuse_opts.emplace_back("-o");
    fuse_opts.push_back(EscapeOptionValue(o));
  }
  normalized->insert(normalized->begin() + 1, fuse_opts.begin(), fuse_opts.end());
}

// The daemon's argv as fuse_opt_parse takes it: a mount helper's translated,
// a --config file's values applied to *cmd (and its FUSE options inserted).
Result<std::vector<std::string>> NormalizeArgs(int argc, const char* const* argv, MountCommand* cmd,
                                               bool* config_error) {
  std::vector<std::string> normalized;
  if (cmd->invocation == Invocation::kMountHelper) {
    S3ORAM_ASSIGN_OR_RETURN(normalized, TranslateHelperArgs(argc, argv, cmd));
    return normalized;
  }
  bool informational = false;
  S3ORAM_ASSIGN_OR_RETURN(normalized,
                          ExtractConfigOption(argc, argv, &cmd->config_file, &informational));
  if (!cmd->config_file.empty() && !informational) {
    auto loaded = LoadClientConfig(cmd->config_file);
    if (!loaded.ok()) {
      if (config_error != nullptr) *config_error = true;
      return loaded.status();
    }
    ApplyConfig(loaded.value(), cmd, &normalized);
  }
  return normalized;
}

// Our own -o options' values, checked and stored in *cmd.
Status ApplyRawOptions(const RawOptions& raw, MountCommand* cmd) {
  std::uint64_t v = 0;
  if (raw.timeout) {
    S3ORAM_RETURN_IF_ERROR(
        WholeNumber("timeout", raw.timeout, 1, kMaxTimeoutSeconds, "seconds", &v));
    cmd->timeout_seconds = static_cast<std::uint32_t>(v);
  }
  if (raw.evict_timeout) {
    S3ORAM_RETURN_IF_ERROR(
        WholeNumber("evict_timeout", raw.evict_timeout, 1, kMaxTimeoutSeconds, "seconds", &v));
    cmd->evict_timeout_seconds = static_cast<std::uint32_t>(v);
  }
  if (raw.writeback_delay) {
    S3ORAM_RETURN_IF_ERROR(WholeNumber("writeback_delay", raw.writeback_delay, 0,
                                       kMaxWritebackDelaySeconds, "seconds", &v));
    cmd->writeback_delay_seconds = static_cast<std::uint32_t>(v);
  }
  if (raw.readahead) {
    S3ORAM_RETURN_IF_ERROR(
        WholeNumber("readahead", raw.readahead, 0, kMaxReadaheadBlocks, "blocks", &v));
    cmd->readahead_blocks = static_cast<std::uint32_t>(v);
  }
  if (raw.pipeline) {
    S3ORAM_RETURN_IF_ERROR(
        WholeNumber("pipeline", raw.pipeline, 1, kMaxPipelineAccesses, "accesses", &v));
    cmd->pipeline_accesses = static_cast<std::uint32_t>(v);
  }
  if (raw.constant_rate) {
    S3ORAM_RETURN_IF_ERROR(
        WholeNumber("constant_rate", raw.constant_rate, 0, kMaxConstantRateMs, "milliseconds", &v));
    if (v != 0 && v < kMinConstantRateMs) {
      return Status::InvalidArgument("constant_rate must be 0 (off) or at least " +
                                     std::to_string(kMinConstantRateMs) + " milliseconds, got " +
                                     raw.constant_rate);
    }
    cmd->constant_rate_ms = static_cast<std::uint32_t>(v);
  }
  if (raw.cache_size) {
    S3ORAM_RETURN_IF_ERROR(WholeNumber("cache_size", raw.cache_size, 1, kMaxCacheMib, "MiB", &v));
    cmd->cache_mib = v;
  }
  if (raw.passfile) cmd->passfile = raw.passfile;

  if (raw.log_file) cmd->log_file = raw.log_file;
  if (raw.log_level) {
    static constexpr std::string_view kLevels[] = {"trace", "debug", "info", "warn", "error"};
    cmd->log_level = raw.log_level;
    bool known = false;
    for (auto l : kLevels) known = known || l == cmd->log_level;
    if (!known) return Status::InvalidArgument("unknown log_level '" + cmd->log_level + "'");
  }
  return Status::Ok();
}

// Adds the options we always set, lets libfuse parse its own, and keeps what
// remains for fuse_session_new.
Status ParseFuseOptions(fuse_args* args, MountCommand* cmd) {
  if (!cmd->state.empty()) {
    // Absolute, so the mount table names the file whatever the cwd was.
    if (char* abs = realpath(cmd->state.c_str(), nullptr)) {
      cmd->state = abs;
      std::free(abs);
    }
  }
  std::string ours = "-osubtype=s3oramfs,default_permissions";
  if (!cmd->state.empty()) ours += ",fsname=" + EscapeOptionValue(cmd->state);
  if (fuse_opt_add_arg(args, ours.c_str()) != 0) return Status::IoError("out of memory");

  fuse_cmdline_opts opts{};
  if (fuse_parse_cmdline(args, &opts) != 0) {
    return Status::InvalidArgument("invalid FUSE options (see --help)");
  }
  std::unique_ptr<char, decltype(&std::free)> mountpoint(opts.mountpoint, &std::free);
  cmd->show_help = opts.show_help != 0;
  cmd->show_version = opts.show_version != 0;
  cmd->debug = opts.debug != 0;
  cmd->single_thread = opts.singlethread != 0;
  // A mount helper always detaches: mount(8) waits for it to return.
  cmd->foreground = cmd->invocation == Invocation::kDaemon && (opts.foreground != 0 || cmd->debug);
  // With --config there are no positional arguments: the mount point is the
  // file's (made absolute and checked by the daemon, not by libfuse).
  if (mountpoint) cmd->mountpoint = mountpoint.get();
  for (int i = 0; i < args->argc; ++i) cmd->fuse_args.emplace_back(args->argv[i]);
  return Status::Ok();
}

}  // namespace

Invocation InvocationFromArgv0(std::string_view argv0) {
  std::string_view base = argv0.substr(argv0.find_last_of('/') + 1);
  if (base == "mount.s3oramfs" || base == "mount.fuse.s3oramfs") return Invocation::kMountHelper;
  return Invocation::kDaemon;
}

std::string EscapeOptionValue(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == ',' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string UsageText(std::string_view program) {
  std::string p(program);
  return "usage: " + p +
         " STATE MOUNTPOINT [-f] [-d] [-s] [-o OPTION[,OPTION...]]\n"
         "       " +
         p +
         " --config FILE [-f] [-d] [-s] [-o OPTION[,OPTION...]]\n"
         "       mount -t s3oramfs STATE MOUNTPOINT [-o OPTIONS]\n"
         "\n"
         "Mounts the s3oramfs filesystem whose client state file is STATE.\n"
         "\n"
         "    --config FILE          take STATE, MOUNTPOINT and options from the TOML file\n"
         "                           FILE (man 5 s3oramfs.toml; a [mount] table with state,\n"
         "                           mountpoint, passfile, cache_size, writeback_delay,\n"
         "                           readahead, pipeline, constant_rate, timeout,\n"
         "                           evict_timeout, log_level,\n"
         "                           log_file, "
         "force,\n"
         "                           refresh_state, fuse_options); -o options\n"
         "                           given as well override the file's\n"
         "\n"
         "s3oramfs options:\n"
         "    -o cache_size=MiB      write-back block cache size (default 64)\n"
         "    -o writeback_delay=SECONDS  written data wait this long in the cache, so that\n"
         "                           small files sharing an ORAM block go in one access\n"
         "                           (default 5; 0: write back when a file is closed);\n"
         "                           fsync, fsync of a directory and unmount write at once\n"
         "    -o readahead=BLOCKS    ORAM blocks fetched ahead of a sequential reader, in the\n"
         "                           background (default 8; 0 to 16; 0: none)\n"
         "    -o pipeline=ACCESSES   ORAM accesses of a flush or a readahead sent together\n"
         "                           (default 8; 1 to 8; 1: one at a time)\n"
         "    -o constant_rate=MS    exactly one ORAM access every MS milliseconds, a dummy\n"
         "                           one when nothing waits, so the servers learn nothing\n"
         "                           from when or how much you work (default 0: off;\n"
         "                           5 to 3600000); costs an access's traffic every MS\n"
         "    -o log_file=PATH       log to PATH (default: syslog; the journal under systemd)\n"
         "    -o log_level=LEVEL     trace, debug, info, warn, error (default info)\n"
         "    -o passfile=PATH       read the passphrase from PATH (mode 0600); without it\n"
         "                           $S3ORAM_PASSPHRASE, else a prompt on the terminal\n"
         "    -o timeout=SECONDS     an ORAM request unanswered this long fails with EIO\n"
         "                           (default 30)\n"
         "    -o evict_timeout=SECONDS  the same for evictions (default 300)\n"
         "    -o force, --force      take the filesystem over from another client that holds\n"
         "                           it (that client is fenced off); only for one that is gone\n"
         "    -o refresh_state       if another device has mounted the filesystem since STATE\n"
         "                           was last used, replace STATE with the newest state\n"
         "                           backup on the servers first (otherwise such a mount is\n"
         "                           refused)\n"
         "    -o _netdev,nofail,auto,noauto,user,nouser,users,defaults,x-*\n"
         "                           fstab options, accepted and ignored\n"
         "\n";
}

Result<MountCommand> ParseMountCommand(int argc, const char* const* argv, bool* config_error) {
  if (config_error != nullptr) *config_error = false;
  MountCommand cmd;
  if (argc < 1 || argv[0] == nullptr) return Status::InvalidArgument("empty command line");
  cmd.invocation = InvocationFromArgv0(argv[0]);

  std::vector<std::string> normalized;
  S3ORAM_ASSIGN_OR_RETURN(normalized, NormalizeArgs(argc, argv, &cmd, config_error));
  if (cmd.show_help) return cmd;

  std::vector<char*> cargv;
  for (auto& s : normalized) cargv.push_back(s.data());
  std::unique_ptr<fuse_args, FuseArgsDeleter> args(new fuse_args{});
  for (char* a : cargv) {
    if (fuse_opt_add_arg(args.get(), a) != 0) return Status::IoError("out of memory");
  }

  RawOptions raw;
  std::string error;
  raw.state = &cmd.state;
  raw.error = &error;
  raw.from_config = !cmd.config_file.empty();
  if (fuse_opt_parse(args.get(), &raw, kOptionSpec, ProcessOption) != 0) {
    return Status::InvalidArgument(error.empty() ? "invalid options" : error);
  }
  cmd.force = cmd.force || raw.force != 0;  // -o force adds to the file's; nothing removes it
  cmd.refresh_state = cmd.refresh_state || raw.refresh_state != 0;  // likewise
  S3ORAM_RETURN_IF_ERROR(ApplyRawOptions(raw, &cmd));
  S3ORAM_RETURN_IF_ERROR(ParseFuseOptions(args.get(), &cmd));
  if (cmd.show_help || cmd.show_version) return cmd;
  if (cmd.state.empty()) return Status::InvalidArgument("missing STATE (the client state file)");
  if (cmd.mountpoint.empty()) return Status::InvalidArgument("missing MOUNTPOINT");
  return cmd;
}

}  // namespace s3oram::fs

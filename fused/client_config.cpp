#include "fused/client_config.h"

#include <toml++/toml.h>

#include <string>

#include "fused/mount_limits.h"
#include "oramcore/base/toml_check.h"

namespace s3oram::fs {
namespace {

using toml_check::TomlChecker;
using toml_check::TypeName;

// The daemon's own -o options: in fuse_options they would bypass the typed,
// range-checked keys (and be applied in a surprising order), so each is
// refused with the key to use instead.
constexpr const char* kOwnOptions[] = {
    "cache_size", "writeback_delay", "readahead",     "pipeline", "log_file",
    "log_level",  "passfile",        "timeout",       "evict_timeout", "force",
    "refresh_state", "constant_rate"};

// An absolute path: the daemon changes to / once it runs in the background,
// and a unit file's working directory is not the user's.
Status AbsolutePath(const TomlChecker& ck, const toml::node& n, const std::string& key,
                    const std::string& what, std::string* out) {
  std::string path;
  S3ORAM_RETURN_IF_ERROR(ck.String(n, key, &path));
  if (path.empty() || path.front() != '/') {
    return ck.Error(n.source(), key,
                    "expected the absolute path of " + what + ", got \"" + path + "\"");
  }
  if (path.find('\0') != std::string::npos) {
    return ck.Error(n.source(), key,
                    "expected a path without NUL bytes, got one containing a NUL byte");
  }
  *out = std::move(path);
  return Status::Ok();
}

Status Seconds(const TomlChecker& ck, const toml::node& n, const std::string& key,
               std::optional<std::uint32_t>* out) {
  std::int64_t v = 0;
  S3ORAM_RETURN_IF_ERROR(ck.Integer(n, key, 1, kMaxTimeoutSeconds, &v));
  *out = static_cast<std::uint32_t>(v);
  return Status::Ok();
}

Status FuseOptions(const TomlChecker& ck, const toml::node& n, const std::string& key,
                   std::vector<std::string>* out) {
  const auto* arr = n.as_array();
  if (arr == nullptr) {
    return ck.Error(n.source(), key,
                    std::string("expected an array of libfuse option strings, got ") +
                        TypeName(n));
  }
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const toml::node& e = *arr->get(i);
    const std::string name = key + "[" + std::to_string(i) + "]";
    std::string option;
    S3ORAM_RETURN_IF_ERROR(ck.String(e, name, &option));
    if (option.empty() || option.find('\0') != std::string::npos) {
      return ck.Error(e.source(), name,
                      "expected a libfuse option such as \"allow_other\", got \"" + option + "\"");
    }
    const std::string option_name = option.substr(0, option.find('='));
    for (const char* own : kOwnOptions) {
      if (option_name == own) {
        return ck.Error(e.source(), name,
                        "expected a libfuse option, got \"" + option + "\" (an s3oramfs option: "
                        "set mount." + own + " instead)");
      }
    }
    out->push_back(std::move(option));
  }
  return Status::Ok();
}

Status ParseMount(const TomlChecker& ck, const toml::table& t, ClientConfig* c) {
  S3ORAM_RETURN_IF_ERROR(ck.OnlyKeys(
      t, "mount.",
      {"state", "mountpoint", "passfile", "cache_size", "writeback_delay", "readahead", "pipeline",
       "constant_rate", "timeout", "evict_timeout", "log_level", "log_file", "force", "refresh_state",
       "fuse_options"}));
  const toml::node* n = t.get("state");
  if (n == nullptr) {
    return ck.Missing(t, "[mount]", "state", "the absolute path of the client state file");
  }
  S3ORAM_RETURN_IF_ERROR(AbsolutePath(ck, *n, "mount.state", "the client state file", &c->state));
  if ((n = t.get("mountpoint")) == nullptr) {
    return ck.Missing(t, "[mount]", "mountpoint", "the absolute path of the mount point");
  }
  S3ORAM_RETURN_IF_ERROR(
      AbsolutePath(ck, *n, "mount.mountpoint", "a directory to mount on", &c->mountpoint));

  if ((n = t.get("passfile")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(
        AbsolutePath(ck, *n, "mount.passfile", "the passphrase file", &c->passfile));
  }
  std::int64_t v = 0;
  if ((n = t.get("cache_size")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(ck.Integer(*n, "mount.cache_size", 1,
                                      static_cast<std::int64_t>(kMaxCacheMib), &v));
    c->cache_mib = static_cast<std::uint64_t>(v);
  }
  if ((n = t.get("writeback_delay")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(ck.Integer(*n, "mount.writeback_delay", 0,
                                      static_cast<std::int64_t>(kMaxWritebackDelaySeconds), &v));
    c->writeback_delay_seconds = static_cast<std::uint32_t>(v);
  }
  if ((n = t.get("readahead")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(
        ck.Integer(*n, "mount.readahead", 0, static_cast<std::int64_t>(kMaxReadaheadBlocks), &v));
    c->readahead_blocks = static_cast<std::uint32_t>(v);
  }
  if ((n = t.get("pipeline")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(
        ck.Integer(*n, "mount.pipeline", 1, static_cast<std::int64_t>(kMaxPipelineAccesses), &v));
    c->pipeline_accesses = static_cast<std::uint32_t>(v);
  }
  if ((n = t.get("constant_rate")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(ck.Integer(*n, "mount.constant_rate", 0,
                                      static_cast<std::int64_t>(kMaxConstantRateMs), &v));
    if (v != 0 && v < static_cast<std::int64_t>(kMinConstantRateMs)) {
      return ck.Error(n->source(), "mount.constant_rate",
                      "expected 0 (off) or an integer in " + std::to_string(kMinConstantRateMs) +
                          ".." + std::to_string(kMaxConstantRateMs) + ", got " +
                          std::to_string(v));
    }
    c->constant_rate_ms = static_cast<std::uint32_t>(v);
  }
  if ((n = t.get("timeout")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(Seconds(ck, *n, "mount.timeout", &c->timeout_seconds));
  }
  if ((n = t.get("evict_timeout")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(Seconds(ck, *n, "mount.evict_timeout", &c->evict_timeout_seconds));
  }
  if ((n = t.get("log_level")) != nullptr) {
    std::string level;
    S3ORAM_RETURN_IF_ERROR(
        ck.OneOf(*n, "mount.log_level", {"trace", "debug", "info", "warn", "error"}, &level));
    c->log_level = std::move(level);
  }
  if ((n = t.get("log_file")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(AbsolutePath(ck, *n, "mount.log_file", "a log file", &c->log_file));
  }
  if ((n = t.get("force")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(ck.Bool(*n, "mount.force", &c->force));
  }
  if ((n = t.get("refresh_state")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(ck.Bool(*n, "mount.refresh_state", &c->refresh_state));
  }
  if ((n = t.get("fuse_options")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(FuseOptions(ck, *n, "mount.fuse_options", &c->fuse_options));
  }
  return Status::Ok();
}

}  // namespace

Result<ClientConfig> ParseClientConfig(std::string_view text, const std::string& origin) {
  const TomlChecker ck(origin);
  toml::table root;
  S3ORAM_ASSIGN_OR_RETURN(root, ck.Parse(text));
  S3ORAM_RETURN_IF_ERROR(ck.OnlyKeys(root, "", {"mount"}));
  const toml::node* mount = root.get("mount");
  if (mount == nullptr) {
    // No location: the table is absent, so no line of the file is at fault.
    return ck.Error(toml::source_region{}, "[mount]",
                    "missing required table (expected [mount] with state and mountpoint)");
  }
  const auto* t = mount->as_table();
  if (t == nullptr) {
    return ck.Error(mount->source(), "mount",
                    std::string("expected a [mount] table, got ") + TypeName(*mount));
  }
  ClientConfig c;
  S3ORAM_RETURN_IF_ERROR(ParseMount(ck, *t, &c));
  return c;
}

Result<ClientConfig> LoadClientConfig(const std::string& path) {
  std::string text;
  S3ORAM_ASSIGN_OR_RETURN(text, toml_check::ReadConfigFile(path));
  return ParseClientConfig(text, path);
}

}  // namespace s3oram::fs

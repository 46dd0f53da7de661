// Strict reading of TOML configuration files, shared by s3oram-serverd's
// config (serverd/config.h) and the FUSE client's (fused/client_config.h).
//
// Every error is an InvalidArgument whose message has the form
//   <origin>[:line:col]: <key path>: <what was expected>[, got <what was there>]
// so an operator can find and fix the line without reading code. The location
// is left out only when nothing in the file is at fault (a required table
// that is absent).
//
// Debian's libtomlplusplus is a compiled library built with TOML_EXCEPTIONS=1
// (it exports only the toml::v3::ex ABI), so parse errors arrive as
// toml::parse_error exceptions; TomlChecker::Parse catches them and none
// escapes this module.
#pragma once

#include <toml++/toml.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "oramcore/base/status.h"

namespace s3oram::toml_check {

// A config file is a few hundred bytes; the cap stops a mistaken path (a
// device, a huge file) from being read whole.
inline constexpr std::size_t kMaxConfigBytes = 1 << 20;

// "an integer", "a string", ...: the type of `n` as it reads in a sentence.
const char* TypeName(const toml::node& n);

// Reads a whole config file: NotFound if it does not exist; IoError if it
// cannot be opened or read or is not a regular file; InvalidArgument if it is
// larger than max_bytes. Every message names the path.
Result<std::string> ReadConfigFile(const std::string& path,
                                   std::size_t max_bytes = kMaxConfigBytes);

// Builds every message with the same origin (a path, or "<string>"). The
// readers check one node each and leave *out untouched on error.
class TomlChecker {
 public:
  explicit TomlChecker(std::string origin) : origin_(std::move(origin)) {}

  // Parses `text`; a syntax error is located and keyed "TOML syntax".
  Result<toml::table> Parse(std::string_view text) const;

  Status Error(const toml::source_region& where, const std::string& key,
               const std::string& message) const;
  // `key` is absent from `table` (reported at the table's own position).
  Status Missing(const toml::node& table, const std::string& table_name, const std::string& key,
                 const std::string& expected) const;
  // Rejects keys not in `allowed`: a misspelt optional key would otherwise be
  // silently replaced by its default. `prefix` ("server.") makes the key path.
  Status OnlyKeys(const toml::table& t, const std::string& prefix,
                  std::initializer_list<const char*> allowed) const;

  Status Integer(const toml::node& n, const std::string& key, std::int64_t lo, std::int64_t hi,
                 std::int64_t* out) const;
  Status String(const toml::node& n, const std::string& key, std::string* out) const;
  Status Bool(const toml::node& n, const std::string& key, bool* out) const;
  // A string that must be one of `choices` (e.g. a log level); a non-string is
  // reported as String does.
  Status OneOf(const toml::node& n, const std::string& key,
               std::initializer_list<const char*> choices, std::string* out) const;

 private:
  std::string origin_;
};

}  // namespace s3oram::toml_check

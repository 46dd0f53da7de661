#include "oramcore/base/toml_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

namespace s3oram::toml_check {

const char* TypeName(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a floating-point number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

Result<std::string> ReadConfigFile(const std::string& path, std::size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  auto err = [](int e) { return std::error_code(e, std::generic_category()).message(); };
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return Status::NotFound("config file " + path + " does not exist");
    return Status::IoError("cannot open config file " + path + ": " + err(e));
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::IoError("config file " + path + " is not a regular file");
  }
  std::string text;
  char buf[16384];
  while (true) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      return Status::IoError("cannot read config file " + path + ": " + err(e));
    }
    if (r == 0) break;
    text.append(buf, static_cast<std::size_t>(r));
    // Checked while reading, so a huge file (or an endless one) stops here.
    if (text.size() > max_bytes) {
      ::close(fd);
      return Status::InvalidArgument("config file " + path + " is larger than " +
                                     std::to_string(max_bytes) + " bytes");
    }
  }
  ::close(fd);
  return text;
}

Result<toml::table> TomlChecker::Parse(std::string_view text) const {
  try {
    return toml::parse(text, origin_);
  } catch (const toml::parse_error& e) {
    return Error(e.source(), "TOML syntax", std::string(e.description()));
  }
}

Status TomlChecker::Error(const toml::source_region& where, const std::string& key,
                          const std::string& message) const {
  std::string at = origin_;
  if (where.begin.line > 0) {
    // Appended piece by piece: `":" + std::to_string(...)` builds temporaries
    // that GCC 12 at -O3 misreads as overlapping copies (-Wrestrict).
    at.append(":").append(std::to_string(where.begin.line));
    at.append(":").append(std::to_string(where.begin.column));
  }
  return Status::InvalidArgument(at + ": " + key + ": " + message);
}

Status TomlChecker::Missing(const toml::node& table, const std::string& table_name,
                            const std::string& key, const std::string& expected) const {
  return Error(table.source(), table_name,
               "missing required key '" + key + "' (expected " + expected + ")");
}

Status TomlChecker::OnlyKeys(const toml::table& t, const std::string& prefix,
                             std::initializer_list<const char*> allowed) const {
  for (auto&& [k, v] : t) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || k.str() == a;
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      return Error(k.source(), prefix + std::string(k.str()),
                   "unknown key (allowed: " + list + ")");
    }
  }
  return Status::Ok();
}

Status TomlChecker::Integer(const toml::node& n, const std::string& key, std::int64_t lo,
                            std::int64_t hi, std::int64_t* out) const {
  const std::string expected = "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
  const auto* v = n.as_integer();
  if (v == nullptr) return Error(n.source(), key, "expected " + expected + ", got " + TypeName(n));
  if (v->get() < lo || v->get() > hi) {
    return Error(n.source(), key, "expected " + expected + ", got " + std::to_string(v->get()));
  }
  *out = v->get();
  return Status::Ok();
}

Status TomlChecker::String(const toml::node& n, const std::string& key, std::string* out) const {
  const auto* v = n.as_string();
  if (v == nullptr) {
    return Error(n.source(), key, std::string("expected a string, got ") + TypeName(n));
  }
  *out = v->get();
  return Status::Ok();
}

Status TomlChecker::Bool(const toml::node& n, const std::string& key, bool* out) const {
  const auto* v = n.as_boolean();
  if (v == nullptr) {
    return Error(n.source(), key, std::string("expected true or false, got ") + TypeName(n));
  }
  *out = v->get();
  return Status::Ok();
}

Status TomlChecker::OneOf(const toml::node& n, const std::string& key,
                          std::initializer_list<const char*> choices, std::string* out) const {
  std::string value;
  S3ORAM_RETURN_IF_ERROR(String(n, key, &value));
  std::string list;
  for (const char* c : choices) {
    if (value == c) {
      *out = std::move(value);
      return Status::Ok();
    }
    list += std::string(list.empty() ? "" : ", ") + c;
  }
  return Error(n.source(), key, "expected one of " + list + ", got \"" + value + "\"");
}

}  // namespace s3oram::toml_check

// s3oram-serverd configuration: strict TOML parsing and rendering.
//
// The generic checks (types, ranges, unknown keys, located messages of the
// form <origin>[:line:col]: <key path>: expected <what>[, got <what>]) live in
// oramcore/base/toml_check.h, shared with the FUSE client's config; this file adds
// what is particular to a server (endpoints, CURVE keys, peers).

#include "serverd/config.h"

#include <toml++/toml.h>

#include <cstdio>
#include <limits>
#include <set>
#include <sstream>
#include <string>

#include "oramcore/base/toml_check.h"
#include "oramcore/crypto/curve_keys.h"
#include "oramcore/math/field.h"

namespace s3oram::serverd {
namespace {

using Checker = toml_check::TomlChecker;
using toml_check::TypeName;

// Party i evaluates its shares at x = i + 1, which must be a non-zero field
// element; this is the only hard bound on an index.
constexpr std::int64_t kMaxPartyIndex = static_cast<std::int64_t>(field::kPrime) - 2;
constexpr std::int64_t kMaxThreads = 1024;
constexpr std::int64_t kMaxPeerTimeoutMs = 24LL * 3600 * 1000;
// ZeroMQ's ipc transport binds an AF_UNIX socket: sun_path holds 107 bytes + NUL.
constexpr std::size_t kMaxIpcPath = 107;

// Why `ep` is not a usable ZeroMQ endpoint, or "" if it is. Accepted:
//   tcp://HOST:PORT  HOST a name or IPv4 address ([A-Za-z0-9.-_]), "[IPv6]",
//                    or "*" (any interface; only where the endpoint is bound);
//                    PORT decimal 1..65535
//   ipc://PATH       PATH non-empty, at most 107 bytes (AF_UNIX limit)
std::string EndpointProblem(const std::string& ep, bool bind) {
  constexpr std::string_view kTcp = "tcp://";
  constexpr std::string_view kIpc = "ipc://";
  const std::string_view s = ep;
  if (s.substr(0, kIpc.size()) == kIpc) {
    const std::string_view path = s.substr(kIpc.size());
    if (path.empty()) return "ipc:// needs a socket path";
    if (path.size() > kMaxIpcPath) {
      return "ipc path is " + std::to_string(path.size()) + " bytes, at most " +
             std::to_string(kMaxIpcPath) + " fit a Unix socket address";
    }
    if (path.find('\0') != std::string_view::npos) return "ipc path contains a NUL byte";
    return "";
  }
  if (s.substr(0, kTcp.size()) != kTcp) return "endpoint must start with tcp:// or ipc://";
  const std::string_view rest = s.substr(kTcp.size());
  const std::size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return "tcp endpoint needs host:port";
  const std::string_view host = rest.substr(0, colon);
  const std::string_view port = rest.substr(colon + 1);
  if (host.empty()) return "tcp endpoint has an empty host";
  if (host == "*") {
    if (!bind) return "host '*' (any interface) can only be listened on, not connected to";
  } else if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return "IPv6 host must be written [address]";
    for (char c : host.substr(1, host.size() - 2)) {
      const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
                      (c >= 'A' && c <= 'F') || c == ':' || c == '.';
      if (!ok) return "invalid character in IPv6 address";
    }
  } else {
    for (char c : host) {
      const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                      (c >= 'A' && c <= 'Z') || c == '.' || c == '-' || c == '_';
      if (!ok) return std::string("invalid character '") + c + "' in host";
    }
  }
  if (port.empty() || port.size() > 5) return "port must be a number in 1..65535";
  unsigned value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return "port must be a number in 1..65535";
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value < 1 || value > 65535) return "port must be a number in 1..65535";
  return "";
}

Status Endpoint(const Checker& ck, const toml::node& n, const std::string& key, bool bind,
                std::string* out) {
  S3ORAM_RETURN_IF_ERROR(ck.String(n, key, out));
  if (std::string why = EndpointProblem(*out, bind); !why.empty()) {
    return ck.Error(n.source(), key,
                    "expected an endpoint \"tcp://host:port\" or \"ipc://path\", got \"" + *out +
                        "\" (" + why + ")");
  }
  return Status::Ok();
}

// A CURVE public key written inline: 40 Z85 characters.
Status CurveKey(const Checker& ck, const toml::node& n, const std::string& key, std::string* out) {
  S3ORAM_RETURN_IF_ERROR(ck.String(n, key, out));
  if (Status z = CheckZ85Key(*out, "the key"); !z.ok()) {
    return ck.Error(n.source(), key,
                    "expected a CURVE public key (40 Z85 characters, the content of a .pub "
                    "file), got \"" + *out + "\" (" + z.message() + ")");
  }
  return Status::Ok();
}

Status CurveKeyArray(const Checker& ck, const toml::node& n, const std::string& key,
                     std::vector<std::string>* out) {
  const auto* arr = n.as_array();
  if (arr == nullptr) {
    return ck.Error(n.source(), key,
                    std::string("expected an array of CURVE public keys, got ") + TypeName(n));
  }
  if (arr->empty()) {
    return ck.Error(n.source(), key, "expected at least one key (otherwise nobody may connect)");
  }
  std::set<std::string> seen;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    std::string k;
    S3ORAM_RETURN_IF_ERROR(CurveKey(ck, *arr->get(i), key + "[" + std::to_string(i) + "]", &k));
    if (!seen.insert(k).second) {
      return ck.Error(arr->get(i)->source(), key + "[" + std::to_string(i) + "]",
                      "expected distinct keys, got \"" + k + "\" twice");
    }
    out->push_back(std::move(k));
  }
  return Status::Ok();
}

Status ParseServer(const Checker& ck, const toml::table& t, ServerConfig* c) {
  S3ORAM_RETURN_IF_ERROR(ck.OnlyKeys(t, "server.",
                                     {"index", "listen", "peer_listen", "data_dir", "threads",
                                      "eviction_nice", "sync", "peer_timeout_ms", "log_level", "secret_key_file",
                                      "authorized_clients"}));
  std::int64_t v = 0;
  const toml::node* n = t.get("index");
  if (n == nullptr) {
    return ck.Missing(t, "[server]", "index",
                      "an integer in 0.." + std::to_string(kMaxPartyIndex));
  }
  S3ORAM_RETURN_IF_ERROR(ck.Integer(*n, "server.index", 0, kMaxPartyIndex, &v));
  c->index = static_cast<std::uint32_t>(v);

  if ((n = t.get("listen")) == nullptr) {
    return ck.Missing(t, "[server]", "listen", "an endpoint \"tcp://host:port\" or \"ipc://path\"");
  }
  S3ORAM_RETURN_IF_ERROR(Endpoint(ck, *n, "server.listen", true, &c->listen));
  if ((n = t.get("peer_listen")) == nullptr) {
    return ck.Missing(t, "[server]", "peer_listen",
                      "an endpoint \"tcp://host:port\" or \"ipc://path\"");
  }
  S3ORAM_RETURN_IF_ERROR(Endpoint(ck, *n, "server.peer_listen", true, &c->peer_listen));
  if (c->peer_listen == c->listen) {
    return ck.Error(n->source(), "server.peer_listen",
                    "expected an endpoint different from server.listen, got the same \"" +
                        c->listen + "\"");
  }

  if ((n = t.get("data_dir")) == nullptr) {
    return ck.Missing(t, "[server]", "data_dir", "a directory path");
  }
  S3ORAM_RETURN_IF_ERROR(ck.String(*n, "server.data_dir", &c->data_dir));
  if (c->data_dir.empty()) {
    return ck.Error(n->source(), "server.data_dir", "expected a directory path, got \"\"");
  }
  if (c->data_dir.find('\0') != std::string::npos) {
    return ck.Error(n->source(), "server.data_dir", "expected a path without NUL bytes");
  }

  if ((n = t.get("secret_key_file")) == nullptr) {
    return ck.Missing(t, "[server]", "secret_key_file",
                      "the path of this server's CURVE secret key (s3oram keygen)");
  }
  S3ORAM_RETURN_IF_ERROR(ck.String(*n, "server.secret_key_file", &c->secret_key_file));
  if (c->secret_key_file.empty() || c->secret_key_file.find('\0') != std::string::npos) {
    return ck.Error(n->source(), "server.secret_key_file", "expected a file path");
  }
  if ((n = t.get("authorized_clients")) == nullptr) {
    return ck.Missing(t, "[server]", "authorized_clients",
                      "an array of the CURVE public keys of the clients allowed to connect");
  }
  S3ORAM_RETURN_IF_ERROR(CurveKeyArray(ck, *n, "server.authorized_clients", &c->authorized_clients));

  if ((n = t.get("threads")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(ck.Integer(*n, "server.threads", 0, kMaxThreads, &v));
    c->threads = static_cast<std::uint32_t>(v);
  }
  if ((n = t.get("eviction_nice")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(ck.Integer(*n, "server.eviction_nice", 0, 19, &v));
    c->eviction_nice = static_cast<std::uint32_t>(v);
  }
  if ((n = t.get("sync")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(ck.Bool(*n, "server.sync", &c->sync));
  }
  if ((n = t.get("peer_timeout_ms")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(ck.Integer(*n, "server.peer_timeout_ms", 1, kMaxPeerTimeoutMs, &v));
    c->peer_timeout_ms = static_cast<std::uint32_t>(v);
  }
  if ((n = t.get("log_level")) != nullptr) {
    S3ORAM_RETURN_IF_ERROR(ck.OneOf(*n, "server.log_level",
                                    {"trace", "debug", "info", "warn", "error"}, &c->log_level));
  }
  return Status::Ok();
}

Status ParsePeers(const Checker& ck, const toml::node& n, ServerConfig* c) {
  const auto* arr = n.as_array();
  if (arr == nullptr) {
    return ck.Error(n.source(), "peer",
                    std::string("expected an array of [[peer]] tables, got ") + TypeName(n));
  }
  if (arr->empty()) {
    return ck.Error(n.source(), "peer", "expected at least one [[peer]] table, got none");
  }
  std::set<std::uint32_t> indices;
  std::set<std::string> endpoints;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const toml::node& e = *arr->get(i);
    const std::string name = "peer[" + std::to_string(i) + "]";
    const auto* t = e.as_table();
    if (t == nullptr) {
      return ck.Error(e.source(), name, std::string("expected a [[peer]] table, got ") + TypeName(e));
    }
    S3ORAM_RETURN_IF_ERROR(ck.OnlyKeys(*t, name + ".", {"index", "endpoint", "public_key"}));
    PeerConfig p;
    std::int64_t v = 0;
    const toml::node* f = t->get("index");
    if (f == nullptr) {
      return ck.Missing(*t, name, "index", "an integer in 0.." + std::to_string(kMaxPartyIndex));
    }
    S3ORAM_RETURN_IF_ERROR(ck.Integer(*f, name + ".index", 0, kMaxPartyIndex, &v));
    p.index = static_cast<std::uint32_t>(v);
    if (p.index == c->index) {
      return ck.Error(f->source(), name + ".index",
                      "expected another server's index, got " + std::to_string(v) +
                          ", which is this server's own server.index");
    }
    if (!indices.insert(p.index).second) {
      return ck.Error(f->source(), name + ".index",
                      "expected distinct peer indices, got " + std::to_string(v) + " twice");
    }
    if ((f = t->get("endpoint")) == nullptr) {
      return ck.Missing(*t, name, "endpoint", "an endpoint \"tcp://host:port\" or \"ipc://path\"");
    }
    S3ORAM_RETURN_IF_ERROR(Endpoint(ck, *f, name + ".endpoint", false, &p.endpoint));
    if (!endpoints.insert(p.endpoint).second) {
      return ck.Error(f->source(), name + ".endpoint",
                      "expected distinct peer endpoints, got \"" + p.endpoint + "\" twice");
    }
    if ((f = t->get("public_key")) == nullptr) {
      return ck.Missing(*t, name, "public_key", "the peer's CURVE public key (its .pub file)");
    }
    S3ORAM_RETURN_IF_ERROR(CurveKey(ck, *f, name + ".public_key", &p.public_key));
    c->peers.push_back(std::move(p));
  }
  return Status::Ok();
}

// A TOML basic string. Escapes what TOML requires (", \, and control
// characters other than tab, including DEL); other bytes pass through, so
// valid UTF-8 stays valid UTF-8.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

}  // namespace

Result<ServerConfig> ParseServerConfig(std::string_view toml_text, const std::string& origin) {
  const Checker ck(origin);
  toml::table root;
  S3ORAM_ASSIGN_OR_RETURN(root, ck.Parse(toml_text));
  S3ORAM_RETURN_IF_ERROR(ck.OnlyKeys(root, "", {"server", "peer"}));
  ServerConfig c;
  const toml::node* server = root.get("server");
  if (server == nullptr) {
    // No location: the table is absent, so no line of the file is at fault.
    return ck.Error(toml::source_region{}, "[server]",
                    "missing required table (expected [server])");
  }
  const auto* st = server->as_table();
  if (st == nullptr) {
    return ck.Error(server->source(), "server",
                    std::string("expected a [server] table, got ") + TypeName(*server));
  }
  S3ORAM_RETURN_IF_ERROR(ParseServer(ck, *st, &c));
  const toml::node* peers = root.get("peer");
  if (peers == nullptr) {
    return ck.Error(toml::source_region{}, "[[peer]]",
                    "missing required tables (expected at least one [[peer]] with index and "
                    "endpoint: the servers this one exchanges SMP shares with)");
  }
  S3ORAM_RETURN_IF_ERROR(ParsePeers(ck, *peers, &c));
  return c;
}

Result<ServerConfig> LoadServerConfig(const std::string& path) {
  std::string text;
  S3ORAM_ASSIGN_OR_RETURN(text, toml_check::ReadConfigFile(path));
  return ParseServerConfig(text, path);
}

std::string RenderServerConfig(const ServerConfig& c) {
  std::ostringstream o;
  o << "# s3oram-serverd configuration (man 5 s3oram-serverd.toml)\n"
    << "[server]\n"
    << "index = " << c.index << "\n"
    << "listen = " << Quote(c.listen) << "\n"
    << "peer_listen = " << Quote(c.peer_listen) << "\n"
    << "data_dir = " << Quote(c.data_dir) << "\n"
    << "threads = " << c.threads << "\n"
    << "eviction_nice = " << c.eviction_nice << "\n"
    << "sync = " << (c.sync ? "true" : "false") << "\n"
    << "peer_timeout_ms = " << c.peer_timeout_ms << "\n"
    << "log_level = " << Quote(c.log_level) << "\n"
    << "secret_key_file = " << Quote(c.secret_key_file) << "\n"
    << "authorized_clients = [";
  for (std::size_t i = 0; i < c.authorized_clients.size(); ++i) {
    o << (i ? ", " : "") << Quote(c.authorized_clients[i]);
  }
  o << "]\n";
  for (const PeerConfig& p : c.peers) {
    o << "\n[[peer]]\n"
      << "index = " << p.index << "\n"
      << "endpoint = " << Quote(p.endpoint) << "\n"
      << "public_key = " << Quote(p.public_key) << "\n";
  }
  return o.str();
}

}  // namespace s3oram::serverd

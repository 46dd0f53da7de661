// s3oram-serverd configuration: the documented schema, strict validation with
// located messages, file loading, and Render/Parse round trips.

#include "serverd/config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/support/test_seed.h"

namespace s3oram::serverd {
namespace {

constexpr const char* kExample = R"(
[server]
index = 0                              # party index 0..parties-1 (x = index + 1)
listen = "tcp://127.0.0.1:7300"        # client-facing ZeroMQ endpoint
peer_listen = "tcp://127.0.0.1:7310"   # endpoint the other servers connect to
data_dir = "/var/lib/s3oramfs/0"
threads = 0                            # kernel threads; 0 = one per core
eviction_nice = 10                     # evictions' CPU priority below accesses'
sync = true                            # fdatasync before acknowledging
peer_timeout_ms = 30000                # give up an eviction round after this
log_level = "info"                     # trace, debug, info, warn, error
secret_key_file = "/etc/s3oramfs/server-0.key"
authorized_clients = ["Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"]

[[peer]]
index = 1
endpoint = "tcp://127.0.0.1:7311"
public_key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"

[[peer]]
index = 2
endpoint = "tcp://127.0.0.1:7312"
public_key = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"
)";

// The minimal valid config: only required keys.
constexpr const char* kMinimal = R"(
[server]
index = 2
listen = "ipc:///run/s3oram/client.sock"
peer_listen = "tcp://*:7312"
data_dir = "data"
secret_key_file = "k"
authorized_clients = ["Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"]

[[peer]]
index = 0
endpoint = "tcp://[::1]:7310"
public_key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
)";

// Valid CURVE public keys (Z85) for configs built in tests.
constexpr const char* kKeys[] = {"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6", "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs"};

// Parses `text` expecting failure; returns the message.
std::string ErrorOf(const std::string& text) {
  auto r = ParseServerConfig(text, "test.toml");
  EXPECT_FALSE(r.ok()) << "accepted:\n" << text;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << r.status().ToString();
  EXPECT_EQ(r.status().message().rfind("test.toml", 0), 0u)
      << "message does not start with the origin: " << r.status().message();
  return r.status().message();
}

// kExample with one line replaced (or removed, if `with` is empty).
std::string Replace(std::string text, const std::string& line, const std::string& with) {
  auto pos = text.find(line);
  EXPECT_NE(pos, std::string::npos) << line;
  auto end = text.find('\n', pos);
  text.replace(pos, end - pos, with);
  return text;
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "in: " << (haystack)

TEST(ServerConfig, ParsesTheDocumentedExample) {
  auto r = ParseServerConfig(kExample, "<string>");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ServerConfig& c = *r;
  EXPECT_EQ(c.index, 0u);
  EXPECT_EQ(c.listen, "tcp://127.0.0.1:7300");
  EXPECT_EQ(c.peer_listen, "tcp://127.0.0.1:7310");
  EXPECT_EQ(c.data_dir, "/var/lib/s3oramfs/0");
  EXPECT_EQ(c.threads, 0u);
  EXPECT_EQ(c.eviction_nice, 10u);
  EXPECT_TRUE(c.sync);
  EXPECT_EQ(c.peer_timeout_ms, 30000u);
  EXPECT_EQ(c.log_level, "info");
  ASSERT_EQ(c.peers.size(), 2u);
  EXPECT_EQ(c.peers[0], (PeerConfig{1, "tcp://127.0.0.1:7311", kKeys[1]}));
  EXPECT_EQ(c.peers[1], (PeerConfig{2, "tcp://127.0.0.1:7312", kKeys[2]}));
  EXPECT_EQ(c.secret_key_file, "/etc/s3oramfs/server-0.key");
  EXPECT_EQ(c.authorized_clients, std::vector<std::string>{kKeys[0]});
}

TEST(ServerConfig, OptionalKeysTakeDefaults) {
  auto r = ParseServerConfig(kMinimal, "<string>");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ServerConfig defaults;
  EXPECT_EQ(r->index, 2u);
  EXPECT_EQ(r->threads, defaults.threads);
  EXPECT_EQ(r->eviction_nice, defaults.eviction_nice);
  EXPECT_EQ(r->sync, defaults.sync);
  EXPECT_EQ(r->peer_timeout_ms, defaults.peer_timeout_ms);
  EXPECT_EQ(r->log_level, defaults.log_level);
  EXPECT_EQ(r->peer_listen, "tcp://*:7312");
  ASSERT_EQ(r->peers.size(), 1u);
  EXPECT_EQ(r->peers[0].endpoint, "tcp://[::1]:7310");
}

TEST(ServerConfig, AcceptsInlineTables) {
  auto r = ParseServerConfig(
      "server = { index = 1, listen = \"tcp://h:1\", peer_listen = \"tcp://h:2\", "
      "data_dir = \"/d\", sync = false, secret_key_file = \"k\", authorized_clients = [\"" +
          std::string(kKeys[0]) + "\"] }\n"
      "peer = [ { index = 0, endpoint = \"tcp://a:3\", public_key = \"" + kKeys[1] +
          "\" }, { index = 2, endpoint = \"ipc://p\", public_key = \"" + kKeys[2] + "\" } ]\n",
      "<string>");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->sync);
  EXPECT_EQ(r->peers.size(), 2u);
}

TEST(ServerConfig, SyntaxErrorsAreLocated) {
  std::string m = ErrorOf("[server]\nindex = = 3\n");
  EXPECT_CONTAINS(m, "test.toml:2:");
  EXPECT_CONTAINS(m, "TOML syntax");
  ErrorOf("[server\n");
  ErrorOf("[server]\nindex = 1\nindex = 2\n");  // duplicate key
}

TEST(ServerConfig, MissingRequiredKeys) {
  for (const char* key : {"index = 0 ", "listen =", "peer_listen =", "data_dir =",
                          "secret_key_file =", "authorized_clients ="}) {
    std::string m = ErrorOf(Replace(kExample, key, ""));
    std::string name(key);
    name = name.substr(0, name.find(' '));
    EXPECT_CONTAINS(m, "missing required key '" + name + "'");
    EXPECT_CONTAINS(m, "[server]");
    EXPECT_CONTAINS(m, "expected");
  }
  EXPECT_CONTAINS(ErrorOf(Replace(kExample, "endpoint = \"tcp://127.0.0.1:7312\"", "")),
                  "peer[1]: missing required key 'endpoint'");
  EXPECT_CONTAINS(ErrorOf(Replace(kExample, "index = 2", "")),
                  "peer[1]: missing required key 'index'");
  EXPECT_CONTAINS(ErrorOf(Replace(kExample, std::string("public_key = \"") + kKeys[2], "")),
                  "peer[1]: missing required key 'public_key'");
  EXPECT_CONTAINS(ErrorOf("[[peer]]\nindex = 1\nendpoint = \"tcp://a:1\"\n"),
                  "missing required table");
  std::string no_peers = kExample;
  no_peers = no_peers.substr(0, no_peers.find("[[peer]]"));
  EXPECT_CONTAINS(ErrorOf(no_peers), "[[peer]]");
  EXPECT_CONTAINS(ErrorOf(""), "[server]");
}

TEST(ServerConfig, UnknownKeysAndTablesAreErrors) {
  std::string m = ErrorOf(Replace(kExample, "threads = 0", "thread = 0"));
  EXPECT_CONTAINS(m, "server.thread: unknown key");
  EXPECT_CONTAINS(m, "allowed: index, listen");
  EXPECT_CONTAINS(m, "test.toml:7:");
  EXPECT_CONTAINS(ErrorOf(std::string(kExample) + "\n[client]\nx = 1\n"), "client: unknown key");
  EXPECT_CONTAINS(ErrorOf(std::string(kExample) + "\n[server.extra]\nx = 1\n"),
                  "server.extra: unknown key");
  EXPECT_CONTAINS(ErrorOf(Replace(kExample, "index = 2", "index = 2\nweight = 3")),
                  "peer[1].weight: unknown key");
  EXPECT_CONTAINS(ErrorOf("top = 1\n" + std::string(kExample)), "top: unknown key");
}

TEST(ServerConfig, CurveKeysAreChecked) {
  const std::string clients = std::string("authorized_clients = [\"") + kKeys[0] + "\"]";
  EXPECT_CONTAINS(ErrorOf(Replace(kExample, clients, "authorized_clients = []")),
                  "at least one key");
  EXPECT_CONTAINS(ErrorOf(Replace(kExample, clients, "authorized_clients = [\"short\"]")),
                  "server.authorized_clients[0]: expected a CURVE public key");
  EXPECT_CONTAINS(ErrorOf(Replace(kExample, clients,
                                  std::string("authorized_clients = [\"") + kKeys[0] + "\", \"" +
                                      kKeys[0] + "\"]")),
                  "distinct keys");
  EXPECT_CONTAINS(ErrorOf(Replace(kExample, clients, "authorized_clients = \"x\"")),
                  "expected an array of CURVE public keys");
  // 40 characters, but not Z85 (a space is not in the alphabet).
  EXPECT_CONTAINS(ErrorOf(Replace(kExample, std::string("public_key = \"") + kKeys[1],
                                  "public_key = \"" + std::string(40, ' ') + "\"")),
                  "peer[0].public_key: expected a CURVE public key");
  EXPECT_CONTAINS(ErrorOf(Replace(kExample, "secret_key_file =", "secret_key_file = \"\"")),
                  "server.secret_key_file");
}

TEST(ServerConfig, TypesAndRangesAreChecked) {
  struct Case {
    const char* line;
    const char* with;
    const char* want;
  };
  const Case cases[] = {
      {"index = 0 ", "index = \"0\"", "server.index: expected an integer in 0..2147483645, got a string"},
      {"index = 0 ", "index = -1", "server.index: expected an integer in 0..2147483645, got -1"},
      {"index = 0 ", "index = 1.0", "got a floating-point number"},
      {"index = 0 ", "index = 2147483646", "got 2147483646"},
      {"threads = 0", "threads = 1025", "server.threads: expected an integer in 0..1024"},
      {"threads = 0", "threads = true", "server.threads: expected an integer in 0..1024, got a boolean"},
      {"eviction_nice = 10", "eviction_nice = 20", "server.eviction_nice: expected an integer in 0..19, got 20"},
      {"eviction_nice = 10", "eviction_nice = -1", "server.eviction_nice: expected an integer in 0..19"},
      {"sync = true", "sync = 1", "server.sync: expected true or false, got an integer"},
      {"sync = true", "sync = \"yes\"", "server.sync: expected true or false, got a string"},
      {"peer_timeout_ms = 30000", "peer_timeout_ms = 0", "server.peer_timeout_ms: expected an integer in 1..86400000, got 0"},
      {"peer_timeout_ms = 30000", "peer_timeout_ms = 4294967296", "got 4294967296"},
      {"log_level = \"info\"", "log_level = \"verbose\"", "server.log_level: expected one of trace, debug, info, warn, error, got \"verbose\""},
      {"log_level = \"info\"", "log_level = 3", "server.log_level: expected a string, got an integer"},
      {"data_dir = \"/var/lib/s3oramfs/0\"", "data_dir = \"\"", "server.data_dir: expected a directory path"},
      {"data_dir = \"/var/lib/s3oramfs/0\"", "data_dir = 1979-05-27", "server.data_dir: expected a string, got a date"},
      {"index = 1", "index = [1]", "peer[0].index: expected an integer in 0..2147483645, got an array"},
  };
  for (const Case& c : cases) {
    std::string m = ErrorOf(Replace(kExample, c.line, c.with));
    EXPECT_CONTAINS(m, c.want);
  }
  const std::string peers_only = std::string(kExample).substr(std::string(kExample).find("[[peer]]"));
  EXPECT_CONTAINS(ErrorOf("server = 3\n" + peers_only),
                  "server: expected a [server] table, got an integer");
  // Top-level `peer` keys must precede [server] to stay out of that table.
  const std::string server_only = std::string(kExample).substr(0, std::string(kExample).find("[[peer]]"));
  EXPECT_CONTAINS(ErrorOf("peer = 5\n" + server_only),
                  "peer: expected an array of [[peer]] tables, got an integer");
  EXPECT_CONTAINS(ErrorOf("peer = [1]\n" + server_only),
                  "peer[0]: expected a [[peer]] table, got an integer");
  EXPECT_CONTAINS(ErrorOf("peer = []\n" + server_only), "expected at least one [[peer]]");
}

TEST(ServerConfig, EndpointSyntax) {
  const char* good_bind[] = {"tcp://127.0.0.1:1", "tcp://*:65535", "tcp://[::1]:7300",
                             "tcp://host-name.example:80", "ipc:///run/s3oram/x.sock",
                             "ipc://@abstract"};
  const char* bad[] = {"127.0.0.1:7300",   "udp://h:1",       "tcp://h",        "tcp://h:",
                       "tcp://:7300",      "tcp://h:0",       "tcp://h:65536",  "tcp://h:7a",
                       "tcp://h:+80",      "tcp://h:123456",  "tcp://h h:1",    "tcp://[::1:1",
                       "tcp://[]:1",       "ipc://",          "tcp://h:*",      "tcp://h/x:1",
                       "tcp://[fe80::1%eth0]:1"};
  for (const char* ep : good_bind) {
    std::string text = Replace(kExample, "listen = \"tcp://127.0.0.1:7300\"",
                               std::string("listen = \"") + ep + "\"");
    auto r = ParseServerConfig(text, "test.toml");
    EXPECT_TRUE(r.ok()) << ep << ": " << r.status().ToString();
  }
  for (const char* ep : bad) {
    std::string m = ErrorOf(Replace(kExample, "listen = \"tcp://127.0.0.1:7300\"",
                                    std::string("listen = \"") + ep + "\""));
    EXPECT_CONTAINS(m, "server.listen: expected an endpoint");
    EXPECT_CONTAINS(m, std::string("got \"") + ep + "\"");
  }
  EXPECT_CONTAINS(ErrorOf(Replace(kExample, "listen = \"tcp://127.0.0.1:7300\"",
                                  "listen = \"ipc://" + std::string(108, 'p') + "\"")),
                  "at most 107");
  // A wildcard host can be listened on but not connected to.
  EXPECT_CONTAINS(ErrorOf(Replace(kExample, "endpoint = \"tcp://127.0.0.1:7311\"",
                                  "endpoint = \"tcp://*:7311\"")),
                  "peer[0].endpoint: expected an endpoint");
}

TEST(ServerConfig, PeerConsistency) {
  std::string m = ErrorOf(Replace(kExample, "index = 2", "index = 1"));
  EXPECT_CONTAINS(m, "peer[1].index: expected distinct peer indices, got 1 twice");
  EXPECT_CONTAINS(m, "test.toml:21:");
  m = ErrorOf(Replace(kExample, "index = 2", "index = 0"));
  EXPECT_CONTAINS(m, "peer[1].index");
  EXPECT_CONTAINS(m, "own server.index");
  m = ErrorOf(Replace(kExample, "endpoint = \"tcp://127.0.0.1:7312\"",
                      "endpoint = \"tcp://127.0.0.1:7311\""));
  EXPECT_CONTAINS(m, "peer[1].endpoint: expected distinct peer endpoints");
  m = ErrorOf(Replace(kExample, "peer_listen = \"tcp://127.0.0.1:7310\"",
                      "peer_listen = \"tcp://127.0.0.1:7300\""));
  EXPECT_CONTAINS(m, "server.peer_listen: expected an endpoint different from server.listen");
}

class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                       "/server_config_test.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    ASSERT_NE(::mkdtemp(buf.data()), nullptr) << std::strerror(errno);
    dir_ = buf.data();
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

TEST_F(ConfigFile, LoadsAFile) {
  const std::string path = Write("server-0.toml", kExample);
  auto r = LoadServerConfig(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->peers.size(), 2u);
}

TEST_F(ConfigFile, ErrorsNameTheFile) {
  const std::string path = Write("bad.toml", Replace(kExample, "threads = 0", "threads = -2"));
  auto r = LoadServerConfig(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind(path + ":7:", 0), 0u) << r.status().message();
  EXPECT_CONTAINS(r.status().message(), "server.threads");
}

TEST_F(ConfigFile, MissingOrUnreadableFile) {
  auto r = LoadServerConfig(dir_ + "/absent.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_CONTAINS(r.status().message(), dir_ + "/absent.toml");

  auto d = LoadServerConfig(dir_);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Status::Code::kIoError);
  EXPECT_CONTAINS(d.status().message(), "not a regular file");

  if (::geteuid() != 0) {  // root reads mode-000 files anyway
    const std::string path = Write("secret.toml", kExample);
    ASSERT_EQ(::chmod(path.c_str(), 0), 0);
    auto u = LoadServerConfig(path);
    ASSERT_FALSE(u.ok());
    EXPECT_EQ(u.status().code(), Status::Code::kIoError);
    EXPECT_CONTAINS(u.status().message(), "Permission denied");
  }
}

TEST(ServerConfig, RenderOfExampleRoundTrips) {
  auto r = ParseServerConfig(kExample, "<string>");
  ASSERT_TRUE(r.ok());
  const std::string text = RenderServerConfig(*r);
  auto back = ParseServerConfig(text, "<rendered>");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  EXPECT_EQ(*back, *r);
}

// Random valid configs, including strings that need every TOML escape.
TEST(ServerConfig, RenderParseRoundTripProperty) {
  auto rng = testing::SeededRng();
  auto pick = [&](std::uint64_t n) { return rng() % n; };
  auto random_string = [&](std::size_t max_len) {
    static const std::vector<std::string> pieces = {
        "a", "Z", "0", "/", " ", "\"", "\\", "\t", "\n", "\r", "\b", "\f", "\x01", "\x1f",
        "\x7f", "#", "'", "=", "[", "]", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x94\x92", "\\u"};
    std::string s;
    const std::size_t n = 1 + pick(max_len);
    for (std::size_t i = 0; i < n; ++i) s += pieces[pick(pieces.size())];
    return s;
  };
  auto random_host = [&]() -> std::string {
    switch (pick(3)) {
      case 0: return std::to_string(pick(256)) + "." + std::to_string(pick(256)) + ".0.1";
      case 1: return "[::" + std::to_string(pick(10)) + "]";
      default: return "node-" + std::to_string(pick(1000)) + ".example";
    }
  };
  auto random_endpoint = [&](bool bind) -> std::string {
    if (pick(4) == 0) return "ipc://" + random_string(20).substr(0, 90);
    std::string host = bind && pick(4) == 0 ? "*" : random_host();
    return "tcp://" + host + ":" + std::to_string(1 + pick(65535));
  };
  const char* levels[] = {"trace", "debug", "info", "warn", "error"};
  int checked = 0;
  for (int iter = 0; iter < 300; ++iter) {
    ServerConfig c;
    c.index = static_cast<std::uint32_t>(pick(2) ? pick(8) : pick(2147483646));
    c.listen = random_endpoint(true);
    c.peer_listen = random_endpoint(true);
    c.data_dir = random_string(30);
    c.threads = static_cast<std::uint32_t>(pick(1025));
    c.eviction_nice = static_cast<std::uint32_t>(pick(20));
    c.sync = pick(2) == 0;
    c.peer_timeout_ms = static_cast<std::uint32_t>(1 + pick(86400000));
    c.log_level = levels[pick(5)];
    c.secret_key_file = random_string(30);
    c.authorized_clients = {kKeys[pick(4)]};
    const std::size_t npeers = 1 + pick(5);
    for (std::size_t i = 0; i < npeers; ++i) {
      PeerConfig p;
      p.index = static_cast<std::uint32_t>(pick(16));
      p.endpoint = random_endpoint(false);
      p.public_key = kKeys[pick(4)];
      c.peers.push_back(p);
    }
    // Keep only configs the validator must accept: distinct indices and
    // endpoints, own index not among peers, listen != peer_listen.
    bool valid = c.listen != c.peer_listen;
    for (std::size_t i = 0; i < c.peers.size(); ++i) {
      valid = valid && c.peers[i].index != c.index;
      for (std::size_t j = 0; j < i; ++j) {
        valid = valid && c.peers[i].index != c.peers[j].index &&
                c.peers[i].endpoint != c.peers[j].endpoint;
      }
    }
    if (!valid) continue;
    const std::string text = RenderServerConfig(c);
    auto back = ParseServerConfig(text, "<rendered>");
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
    ASSERT_EQ(*back, c) << text;
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

// Arbitrary mutations of a valid file never crash the parser and either
// parse or fail with a located InvalidArgument.
TEST(ServerConfig, MutatedInputNeverCrashes) {
  auto rng = testing::SeededRng();
  const std::string base = kExample;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t pos = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[pos] = static_cast<char>(rng() % 256); break;
        case 1: text.erase(pos, 1 + rng() % 8); break;
        default: text.insert(pos, 1, static_cast<char>(rng() % 256)); break;
      }
      if (text.empty()) text = "x";
    }
    auto r = ParseServerConfig(text, "fuzz.toml");
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
      EXPECT_EQ(r.status().message().rfind("fuzz.toml", 0), 0u) << r.status().message();
    }
  }
}

}  // namespace
}  // namespace s3oram::serverd

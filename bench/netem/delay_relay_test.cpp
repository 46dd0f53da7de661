// DelayRelay against real sockets on 127.0.0.1: bytes arrive intact and in
// order through several connections, each direction is held at least the
// delay (a lower bound, which a slow machine cannot break), a bounded buffer
// loses nothing, and a refused upstream ends the client's connection.
#include "bench/netem/delay_relay.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "tests/support/test_seed.h"

namespace s3oram::netem {
namespace {

using Clock = std::chrono::steady_clock;

int Listen(std::uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

int Connect(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0)
      << std::strerror(errno);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval tv{30, 0};  // every test is bounded: a stuck read fails after 30 s
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

bool ReadExactly(int fd, char* out, std::size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, out, n);
    if (r <= 0) return false;
    out += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool WriteAll(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w <= 0) return false;
    data += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// Accepts `connections` connections and echoes each until EOF, then closes it.
class EchoServer {
 public:
  explicit EchoServer(int connections) : fd_(Listen(&port_)) {
    thread_ = std::thread([this, connections] {
      std::vector<std::thread> echoes;
      for (int i = 0; i < connections; ++i) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) break;
        echoes.emplace_back([c] {
          std::vector<char> buf(8192);
          for (;;) {
            const ssize_t r = ::read(c, buf.data(), buf.size());
            if (r <= 0 || !WriteAll(c, buf.data(), static_cast<std::size_t>(r))) break;
          }
          ::close(c);
        });
      }
      for (auto& t : echoes) t.join();
    });
  }
  ~EchoServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::uint16_t port() const { return port_; }

 private:
  std::uint16_t port_ = 0;
  int fd_;
  std::thread thread_;
};

class RelayThread {
 public:
  RelayThread(std::uint16_t upstream, std::chrono::microseconds delay, std::size_t max_buffered)
      : relay_({Forward{"127.0.0.1", 0, "127.0.0.1", upstream}}, delay, max_buffered),
        thread_([this] { relay_.Run(std::chrono::seconds(120)); }) {}
  ~RelayThread() {
    relay_.Stop();
    thread_.join();
  }
  std::uint16_t port() const { return relay_.bound_ports().at(0); }
  DelayRelay& relay() { return relay_; }

 private:
  DelayRelay relay_;
  std::thread thread_;
};

TEST(DelayRelayTest, ParseForwardAcceptsOnlyNumericAddressesAndPorts) {
  Forward f;
  std::string error;
  ASSERT_TRUE(ParseForward("127.0.0.1:7000=198.18.0.2:7300", &f, &error)) << error;
  EXPECT_EQ(f.listen_host, "127.0.0.1");
  EXPECT_EQ(f.listen_port, 7000);
  EXPECT_EQ(f.upstream_host, "198.18.0.2");
  EXPECT_EQ(f.upstream_port, 7300);
  for (const char* bad : {"", "127.0.0.1:7000", "127.0.0.1:7000=", "localhost:1=127.0.0.1:2",
                          "127.0.0.1:70000=127.0.0.1:2", "127.0.0.1:1=127.0.0.1:0",
                          "127.0.0.1:x=127.0.0.1:2", ":1=127.0.0.1:2"}) {
    EXPECT_FALSE(ParseForward(bad, &f, &error)) << bad;
    EXPECT_NE(error.find("expected"), std::string::npos);
  }
}

TEST(DelayRelayTest, EchoThroughRelayIsIntactAndHeldTheDelayEachWay) {
  auto rng = testing::SeededRng();
  const auto delay = std::chrono::milliseconds(25);
  EchoServer echo(3);
  RelayThread relay(echo.port(), delay, 16u << 20);

  std::vector<std::thread> clients;
  std::vector<int> ok(3, 0);
  std::vector<std::uint64_t> seeds = {rng(), rng(), rng()};
  for (int c = 0; c < 3; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937_64 local(seeds[c]);
      const int fd = Connect(relay.port());
      // A small message first: its round trip crosses the relay twice.
      const auto t0 = Clock::now();
      char ping = 'p', pong = 0;
      if (!WriteAll(fd, &ping, 1) || !ReadExactly(fd, &pong, 1) || pong != 'p') return;
      if (Clock::now() - t0 < 2 * delay) return;
      // Then 1 MiB in pieces of random size, read back while it is being sent.
      std::vector<char> sent(1 << 20);
      for (auto& b : sent) b = static_cast<char>(local());
      std::thread writer([&] {
        std::size_t off = 0;
        while (off < sent.size()) {
          const std::size_t n = std::min<std::size_t>(1 + local() % 20000, sent.size() - off);
          if (!WriteAll(fd, sent.data() + off, n)) break;
          off += n;
        }
      });
      std::vector<char> got(sent.size());
      const bool read_ok = ReadExactly(fd, got.data(), got.size());
      writer.join();
      ::shutdown(fd, SHUT_WR);
      char extra;
      const bool eof = ::read(fd, &extra, 1) == 0;  // the echo's close comes back through the relay
      ::close(fd);
      ok[c] = read_ok && got == sent && eof;
    });
  }
  for (auto& t : clients) t.join();
  for (int c = 0; c < 3; ++c) EXPECT_TRUE(ok[c]) << "connection " << c;
  EXPECT_EQ(relay.relay().counters().connections, 3u);
  EXPECT_EQ(relay.relay().counters().bytes_relayed, 3u * 2u * ((1u << 20) + 1u));
}

TEST(DelayRelayTest, SmallBufferPushesBackAndLosesNothing) {
  auto rng = testing::SeededRng();
  EchoServer echo(1);
  RelayThread relay(echo.port(), std::chrono::milliseconds(1), 4096);
  const int fd = Connect(relay.port());
  std::vector<char> sent(4 << 20);
  for (auto& b : sent) b = static_cast<char>(rng());
  std::thread writer([&] { WriteAll(fd, sent.data(), sent.size()); });
  std::vector<char> got(sent.size());
  EXPECT_TRUE(ReadExactly(fd, got.data(), got.size()));
  writer.join();
  ::close(fd);
  EXPECT_TRUE(got == sent);
}

TEST(DelayRelayTest, RefusedUpstreamEndsTheClientConnection) {
  std::uint16_t dead_port = 0;
  ::close(Listen(&dead_port));  // a port nothing listens on any more
  RelayThread relay(dead_port, std::chrono::milliseconds(1), 4096);
  const int fd = Connect(relay.port());
  char c;
  const ssize_t r = ::read(fd, &c, 1);
  const int err = errno;
  EXPECT_LE(r, 0);  // EOF or reset, not a hang (SO_RCVTIMEO bounds it: EAGAIN)
  if (r < 0) {
    EXPECT_NE(err, EAGAIN);
  }
  ::close(fd);
  EXPECT_EQ(relay.relay().counters().connections, 0u);
}

}  // namespace
}  // namespace s3oram::netem

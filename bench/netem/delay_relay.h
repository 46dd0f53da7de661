// A TCP relay that adds a fixed one-way delay: the latency half of the
// network emulation in bench/net-bench (this kernel has tbf and htb, which
// shape bandwidth, but no netem, which would add delay).
//
// Each Forward listens on one address and, per accepted connection, opens one
// connection to its upstream address. Every chunk read on either side is
// written to the other side no earlier than `delay` after it was read, in
// order; nothing is dropped, merged with another connection's bytes or
// reordered. A half-close (EOF) is passed on after the bytes before it. Both
// sockets get TCP_NODELAY, so the relay adds no Nagle delay of its own.
//
// Memory is bounded: a direction that holds `max_buffered` bytes not yet
// written stops reading until it drains, so a slow (shaped) link downstream
// pushes back on the sender through TCP flow control, as the real link would.
//
// What it does not emulate: loss, jitter, reordering, and the sender's TCP
// congestion window over the long path (the relay terminates TCP on both
// sides, so each leg's TCP sees a short round trip). docs/PERFORMANCE.md
// states this next to the figures.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace s3oram::netem {

struct Forward {
  std::string listen_host;        // numeric IPv4 address
  std::uint16_t listen_port = 0;  // 0: any free port (see DelayRelay::bound_ports)
  std::string upstream_host;      // numeric IPv4 address
  std::uint16_t upstream_port = 0;
};

struct RelayCounters {
  std::uint64_t connections = 0;
  std::uint64_t bytes_relayed = 0;  // both directions, all connections
};

// Parses "LHOST:LPORT=UHOST:UPORT"; false (and why in *error) on bad syntax.
bool ParseForward(const std::string& text, Forward* out, std::string* error);

class DelayRelay {
 public:
  // Binds every forward's listening socket (throws std::system_error with the
  // address if one cannot be bound). Nothing runs until Run().
  DelayRelay(std::vector<Forward> forwards, std::chrono::microseconds delay,
             std::size_t max_buffered = 16u << 20);
  ~DelayRelay();
  DelayRelay(const DelayRelay&) = delete;
  DelayRelay& operator=(const DelayRelay&) = delete;

  // The port each forward listens on, in the order given (useful with port 0).
  std::vector<std::uint16_t> bound_ports() const;

  // Serves until Stop() (from any thread) or, if lifetime > 0, until lifetime
  // has passed; then closes every socket.
  void Run(std::chrono::seconds lifetime = std::chrono::seconds(0));
  void Stop();

  RelayCounters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace s3oram::netem

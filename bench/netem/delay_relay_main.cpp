// s3oram-delay-relay: the delay half of bench/net-bench's network emulation
// (see delay_relay.h). Runs until SIGTERM or SIGINT, or until --lifetime.
#include <signal.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "bench/netem/delay_relay.h"

namespace {

constexpr const char* kUsage =
    "usage: s3oram-delay-relay --delay-ms MS --forward LHOST:LPORT=UHOST:UPORT [--forward ...]\n"
    "                          [--max-buffer BYTES] [--lifetime SEC] [--ready-file FILE]\n"
    "\n"
    "Relays TCP connections, holding every chunk for MS milliseconds (a decimal,\n"
    "e.g. 0.2) in each direction. --max-buffer bounds the bytes one direction of\n"
    "one connection holds before it stops reading (default 16 MiB). --lifetime\n"
    "ends the relay by itself after SEC seconds (0 = until SIGTERM/SIGINT).\n"
    "--ready-file is written (bound ports, one per line) once every forward\n"
    "listens. Addresses are numeric IPv4.\n";

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr, "s3oram-delay-relay: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

template <typename T>
T ParseNumber(const std::string& flag, const std::string& text) {
  T value{};
  auto [ptr, err] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (err != std::errc() || ptr != text.data() + text.size())
    Usage(flag + ": not a number: " + text);
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<s3oram::netem::Forward> forwards;
  double delay_ms = -1;
  std::size_t max_buffer = 16u << 20;
  long lifetime = 0;
  std::string ready_file;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) Usage(arg + ": missing value (or unknown option)");
    const std::string value = argv[++i];
    if (arg == "--delay-ms") {
      delay_ms = ParseNumber<double>(arg, value);
      if (!(delay_ms >= 0 && delay_ms <= 10000)) Usage("--delay-ms: 0 to 10000 expected");
    } else if (arg == "--forward") {
      s3oram::netem::Forward f;
      std::string error;
      if (!s3oram::netem::ParseForward(value, &f, &error)) Usage(error);
      forwards.push_back(f);
    } else if (arg == "--max-buffer") {
      max_buffer = ParseNumber<std::size_t>(arg, value);
      if (max_buffer < 4096) Usage("--max-buffer: at least 4096");
    } else if (arg == "--lifetime") {
      lifetime = ParseNumber<long>(arg, value);
      if (lifetime < 0) Usage("--lifetime: 0 or more seconds");
    } else if (arg == "--ready-file") {
      ready_file = value;
    } else {
      Usage("unknown option " + arg);
    }
  }
  if (delay_ms < 0) Usage("--delay-ms is required");
  if (forwards.empty()) Usage("at least one --forward is required");

  // Signals go to the waiting main thread only (blocked before any thread starts).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const auto delay = std::chrono::microseconds(static_cast<long long>(delay_ms * 1000.0 + 0.5));
  try {
    s3oram::netem::DelayRelay relay(forwards, delay, max_buffer);
    if (!ready_file.empty()) {
      const std::string tmp = ready_file + ".tmp";
      {
        std::ofstream out(tmp);
        for (auto port : relay.bound_ports()) out << port << "\n";
        if (!out) throw std::runtime_error("cannot write " + tmp);
      }
      if (std::rename(tmp.c_str(), ready_file.c_str()) != 0) {
        throw std::runtime_error("cannot rename " + tmp + ": " + std::strerror(errno));
      }
    }
    std::thread runner([&] { relay.Run(std::chrono::seconds(lifetime)); });
    std::thread waiter([&] {
      int sig = 0;
      sigwait(&signals, &sig);
      relay.Stop();
    });
    runner.join();
    // The relay ended by itself (lifetime): wake the signal waiter.
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
    const auto c = relay.counters();
    std::fprintf(stderr, "s3oram-delay-relay: %llu connections, %llu bytes relayed\n",
                 static_cast<unsigned long long>(c.connections),
                 static_cast<unsigned long long>(c.bytes_relayed));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "s3oram-delay-relay: %s\n", e.what());
    return 1;
  }
  return 0;
}

// LivenessMonitor: tells a server that is down (stopped, killed, cut off)
// from one that is only slow, for NetworkServerSet (wire/transport.h), so that
// a request to a down server fails within seconds instead of waiting out its
// deadline (30 s by default, ten minutes for an eviction), and the requests
// after it fail at once until the server answers again.
//
// How: a request that stays open past `SuspectAfter()` makes the transport
// ask for a check (Check). The monitor sends the server a STATUS on a
// connection of its own; a server answers STATUS on its serving loop beside
// a busy worker (serverd/server.h), so a server that computes for minutes
// still answers within a round trip, and one that is stopped, dead or cut off
// does not. No answer within `CheckDeadline()` marks the server down (logged
// once); while it is down it is checked again every 0.5 s, and its first
// answer marks it up (logged once).
//
// Guarantees: checks change nothing on a server (STATUS is a read that any
// client may send, under a zero header) and carry nothing of the filesystem;
// at most one check per server is outstanding, and a server that answered a
// check in the last `kFreshFor` is not checked again. The thread starts at
// the first check and stops with the monitor. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "oramcore/base/secret.h"
#include "oramcore/wire/server_down.h"

namespace s3oram {

class LivenessMonitor {
 public:
  using Clock = std::chrono::steady_clock;
  // A server that answered a check this recently is not checked again.
  static constexpr std::chrono::milliseconds kFreshFor{2000};
  // How often a down server is checked again: what a returning server
  // waits, at most, before requests go to it again (plus a reconnection).
  static constexpr std::chrono::milliseconds kRecheckEvery{500};
  // The bounds of CheckDeadline(): a loaded machine's server answers STATUS
  // within the lower one (its serving loop does nothing else); the upper
  // one keeps detection under 5 s with SuspectAfter() included.
  static constexpr std::chrono::milliseconds kMinCheckDeadline{2000};
  static constexpr std::chrono::milliseconds kMaxCheckDeadline{4000};
  static constexpr std::chrono::milliseconds kMinSuspectAfter{1000};

  struct Target {
    std::string endpoint;    // "tcp://host:port"
    std::string server_key;  // its CURVE public key (Z85)
  };
  // Nothing is connected or started until the first Check. `context` is the
  // ZeroMQ context of the caller's sockets (it must outlive the monitor);
  // client_secret is the client's CURVE secret key, 32 bytes.
  // log: whether each change of a server's state is logged (spdlog).
  LivenessMonitor(void* context, std::vector<Target> targets, std::string client_public_key,
                  Secret client_secret, bool log = true);
  ~LivenessMonitor();
  LivenessMonitor(const LivenessMonitor&) = delete;
  LivenessMonitor& operator=(const LivenessMonitor&) = delete;

  // Asks for a check of server i (no-op while one is under way or if it
  // answered one within kFreshFor).
  void Check(std::size_t i);
  // Server i answered a request on the caller's own connection: it is
  // there. Ends a check under way (a check's STATUS may queue behind the
  // client's uploads on a saturated link) and a down verdict, and counts as
  // a fresh answer for kFreshFor.
  void Heard(std::size_t i);
  // What the caller's own connection says of server i when it cannot say
  // whether the server is there (its CURVE handshakes failing with no
  // refusal); empty once a handshake succeeds. A down verdict's reason
  // carries it, so every message and log line that names the verdict does.
  void NoteDoubt(std::size_t i, std::string doubt);
  // Whether server i counts as down, and why (with the doubt noted, if any).
  std::optional<ServerDown> Down(std::size_t i) const;
  // The link's round trip as the transport learned it: the deadlines below
  // grow with it.
  void SetRoundTrip(std::chrono::duration<double> round_trip);
  // How long a request stays open before its server is checked.
  std::chrono::milliseconds SuspectAfter() const;
  // How long a check waits for its answer.
  std::chrono::milliseconds CheckDeadline() const;

 private:
  struct PerServer {
    bool wanted = false;     // a check was asked for
    bool in_flight = false;  // a check was sent and not answered yet
    Clock::time_point sent;
    Clock::time_point last_answer;  // epoch: never
    std::optional<ServerDown> down;
    std::string doubt;  // NoteDoubt's
  };
  static ServerDown WithDoubt(const PerServer& s, ServerDown down);
  void Run();
  bool OpenSockets(std::vector<void*>& sockets);
  void SendCheck(std::size_t i, void* socket, Clock::time_point now);
  void TakeAnswers(std::size_t i, void* socket, Clock::time_point now);
  void ExpireChecks(Clock::time_point now);
  std::chrono::milliseconds CheckDeadlineLocked() const;  // CheckDeadline, mu_ held

  void* context_;
  const std::vector<Target> targets_;
  const std::string client_public_;
  const bool log_;
  Secret client_secret_;  // zeroed once the thread's sockets hold it

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<PerServer> servers_;  // guarded by mu_
  std::chrono::duration<double> round_trip_{0};
  bool stop_ = false;
  std::uint64_t seq_ = 0;
  std::thread thread_;  // started by the first Check
};

}  // namespace s3oram

// A mount daemon's control socket: a Unix stream socket beside the client
// state (ControlSocketPath: `<state>.ctl`) through which `s3oram status`
// asks the mount that serves that state, instead of opening the state
// itself (which takes the passphrase, its Argon2id, and a connection per
// server).
//
// Protocol: one request per connection, one line of at most
// kMaxRequestBytes ("status <timeout ms>"); the answer is the line
// "exit <code>" followed by text, up to the daemon closing the connection.
//
// Who may ask: the daemon's own user. The socket is made mode 0600 before it
// listens, and every peer's credentials (SO_PEERCRED) are checked; a peer of
// another user is told so and closed. The asking side checks the same of
// the daemon. What a status shows (servers, counters, leases) is less than
// the mount itself shows that user.
//
// Guarantees: the path is the daemon's while it holds the state's lock (a
// socket left by a killed daemon is replaced; anything else at the path is
// refused, never removed); requests are served one at a time on a thread of
// the server's own, a peer that does not send its request within
// kRequestDeadline is dropped; the socket file is removed when the server
// stops.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "oramcore/base/status.h"

namespace s3oram::fs {

std::string ControlSocketPath(const std::string& state_path);

struct ControlAnswer {
  int exit_code = 0;
  std::string text;
};

class ControlServer {
 public:
  static constexpr std::size_t kMaxRequestBytes = 256;
  static constexpr std::chrono::milliseconds kRequestDeadline{2000};
  // The answer to one request line (without its newline). Called on the
  // server's thread, one at a time.
  using Handler = std::function<ControlAnswer(const std::string& request)>;

  // Binds ControlSocketPath(state_path) (the caller holds the state's lock)
  // and starts serving.
  static Result<std::unique_ptr<ControlServer>> Start(const std::string& state_path,
                                                      Handler handler);
  ~ControlServer();  // stops serving (after the request under way) and removes the socket
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  const std::string& path() const;

 private:
  struct Impl;
  explicit ControlServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Sends `request` to the daemon serving `state_path` and reads its answer
// within `timeout`. nullopt when no daemon serves it (no socket, or one a
// killed daemon left); an error when one is there but does not answer in
// time, answers garbage, or runs as another user.
Result<std::optional<ControlAnswer>> AskMountDaemon(const std::string& state_path,
                                                    const std::string& request,
                                                    std::chrono::milliseconds timeout);

}  // namespace s3oram::fs

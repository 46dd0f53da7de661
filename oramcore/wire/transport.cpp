#include "oramcore/wire/transport.h"

#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>

namespace s3oram {

namespace {

std::string ZmqError(const char* what) {
  return std::string(what) + ": " + zmq_strerror(zmq_errno());
}

// Receives every pending frame on `socket` without blocking, keeping the one
// that answers `header` (same seq, expected or error type) in `out`.
// Returns true once an acceptable reply has been stored.
bool DrainReplies(void* socket, const wire::Header& header, wire::MessageType expected,
                  wire::Message* out, std::uint64_t* bytes, Status* decode_error) {
  for (;;) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    int n = zmq_msg_recv(&msg, socket, ZMQ_DONTWAIT);
    if (n < 0) {
      zmq_msg_close(&msg);
      return false;
    }
    const bool more = zmq_msg_more(&msg);
    auto data = static_cast<const std::uint8_t*>(zmq_msg_data(&msg));
    auto decoded = wire::Decode(std::span<const std::uint8_t>(data, zmq_msg_size(&msg)));
    const std::size_t size = zmq_msg_size(&msg);
    zmq_msg_close(&msg);
    if (more) continue;  // we never send multipart; ignore such junk
    if (!decoded.ok()) {
      *decode_error = decoded.status();
      continue;
    }
    const wire::Message& m = decoded.value();
    if (m.header.seq != header.seq) continue;  // late reply to an earlier request
    if (m.header.type != expected && m.header.type != wire::MessageType::kError) {
      *decode_error = Status::Protocol(std::string("unexpected reply type ") +
                                       wire::MessageTypeName(m.header.type) + ", wanted " +
                                       wire::MessageTypeName(expected));
      continue;
    }
    *bytes += size;
    *out = std::move(decoded).value();
    return true;
  }
}

// Reads the pending socket-monitor events of one server's socket and
// records what the CURVE handshake said. Each event is two frames: 16-bit
// event id + 32-bit value, then the endpoint.
// Handshakes that failed without an authentication verdict (protocol error,
// or the connection dropped mid-handshake: also what a restarting server
// looks like) before the client calls the server's key wrong.
constexpr int kHandshakeFailuresBeforeVerdict = 3;

void DrainMonitor(void* monitor, std::string* handshake_error, bool* handshake_ok,
                  int* unexplained_failures, std::uint64_t* connections) {
  for (;;) {
    zmq_msg_t head;
    zmq_msg_init(&head);
    if (zmq_msg_recv(&head, monitor, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&head);
      return;
    }
    std::uint16_t event = 0;
    std::uint32_t value = 0;
    if (zmq_msg_size(&head) >= 6) {
      std::memcpy(&event, zmq_msg_data(&head), 2);
      std::memcpy(&value, static_cast<const char*>(zmq_msg_data(&head)) + 2, 4);
    }
    const bool more = zmq_msg_more(&head);
    zmq_msg_close(&head);
    if (more) {
      zmq_msg_t addr;
      zmq_msg_init(&addr);
      zmq_msg_recv(&addr, monitor, 0);
      zmq_msg_close(&addr);
    }
    switch (event) {
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        ++*connections;  // every (re)connection completes one handshake
        *handshake_ok = true;
        *unexplained_failures = 0;
        handshake_error->clear();
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        *handshake_error = "the server refused this client's CURVE key (ZAP status " +
                           std::to_string(value) +
                           "): add the client's public key to the server's authorized_clients";
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        if (++*unexplained_failures >= kHandshakeFailuresBeforeVerdict) {
          *handshake_error =
              "the CURVE handshake failed " + std::to_string(*unexplained_failures) +
              " times in a row: the server's public key in the client state does not match the "
              "server (or it is not an s3oram server)";
        }
        break;
      default:
        break;
    }
  }
}

}  // namespace

struct ServerSet::Impl {
  void* context = nullptr;
  std::vector<void*> sockets;
  std::vector<void*> monitors;  // PAIR sockets receiving each socket's events
  std::vector<std::string> endpoints;
  std::vector<std::string> handshake_errors;  // last CURVE failure per server, if any
  std::vector<bool> handshake_ok;
  std::vector<int> handshake_failures;     // consecutive, without an auth verdict
  std::vector<std::uint64_t> connections;  // handshakes completed so far, per server
  // Smoothed seconds per byte of the large exchanges beyond the round trip
  // (request and reply bytes of all servers); 0 until one was.
  double seconds_per_byte = 0;
  double round_trip_s = 0;                   // smoothed duration of the small exchanges
  std::map<int, std::uint64_t> reply_bytes;  // last exchange's reply bytes, by reply type

  void Drain(std::size_t i) {
    bool ok = handshake_ok[i];
    DrainMonitor(monitors[i], &handshake_errors[i], &ok, &handshake_failures[i], &connections[i]);
    handshake_ok[i] = ok;
  }

  ~Impl() {
    for (void* s : sockets) zmq_close(s);
    for (void* m : monitors) zmq_close(m);
    if (context) zmq_ctx_term(context);
  }
};

ServerSet::~ServerSet() = default;

Result<std::unique_ptr<ServerSet>> ServerSet::Connect(const std::vector<std::string>& endpoints,
                                                      const std::vector<std::string>& server_keys,
                                                      const CurveKeypair& client) {
  if (server_keys.size() != endpoints.size()) {
    return Status::InvalidArgument("one CURVE public key per server expected (" +
                                   std::to_string(endpoints.size()) + " servers, " +
                                   std::to_string(server_keys.size()) + " keys)");
  }
  for (std::size_t i = 0; i < server_keys.size(); ++i) {
    S3ORAM_RETURN_IF_ERROR(
        CheckZ85Key(server_keys[i], "the public key of server " + std::to_string(i)));
  }
  S3ORAM_RETURN_IF_ERROR(CheckZ85Key(client.public_key, "the client's public key"));
  std::unique_ptr<ServerSet> set(new ServerSet());
  set->impl_ = std::make_unique<Impl>();
  Impl& impl = *set->impl_;
  impl.context = zmq_ctx_new();
  if (!impl.context) return Status::IoError(ZmqError("zmq_ctx_new"));
  // The secret key in binary (32 bytes): libzmq copies a Z85 option through
  // a temporary string it never wipes.
  S3ORAM_ASSIGN_OR_RETURN(Secret secret_bin, DecodeSecretKey(client));
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    const std::string& ep = endpoints[i];
    void* s = zmq_socket(impl.context, ZMQ_DEALER);
    if (!s) return Status::IoError(ZmqError("zmq_socket"));
    impl.sockets.push_back(s);
    // CURVE on every link: the server is authenticated by its public key,
    // the client by its keypair (the server's ZAP handler checks it).
    if (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_keys[i].c_str(), kCurveKeyChars + 1) != 0 ||
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, client.public_key.c_str(), kCurveKeyChars + 1) !=
            0 ||
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, secret_bin.data(), secret_bin.size()) != 0) {
      return Status::InvalidArgument(ZmqError("setting CURVE keys"));
    }
    const std::string monitor_ep =
        "inproc://s3oram-monitor-" + std::to_string(reinterpret_cast<std::uintptr_t>(s));
    if (zmq_socket_monitor(s, monitor_ep.c_str(),
                           ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0) {
      return Status::IoError(ZmqError("zmq_socket_monitor"));
    }
    void* mon = zmq_socket(impl.context, ZMQ_PAIR);
    if (!mon || zmq_connect(mon, monitor_ep.c_str()) != 0) {
      if (mon) zmq_close(mon);
      return Status::IoError(ZmqError("connecting the socket monitor"));
    }
    impl.monitors.push_back(mon);
    impl.handshake_errors.emplace_back();
    impl.handshake_ok.push_back(false);
    impl.handshake_failures.push_back(0);
    impl.connections.push_back(0);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    // Unbounded queues: a request is at most one eviction's matrices, and we
    // never have more than one outstanding per server.
    int hwm = 0;
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    int reconnect_ivl = 100, reconnect_max = 1000;
    zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &reconnect_ivl, sizeof reconnect_ivl);
    zmq_setsockopt(s, ZMQ_RECONNECT_IVL_MAX, &reconnect_max, sizeof reconnect_max);
    if (zmq_connect(s, ep.c_str()) != 0) {
      return Status::InvalidArgument(ZmqError(("connecting to " + ep).c_str()));
    }
    impl.endpoints.push_back(ep);
  }
  return set;
}

std::size_t ServerSet::size() const { return impl_->sockets.size(); }
const std::string& ServerSet::endpoint(std::size_t i) const { return impl_->endpoints.at(i); }

Result<std::vector<wire::Message>> ServerSet::Exchange(
    const std::vector<std::vector<std::uint8_t>>& frames, const wire::Header& header,
    wire::MessageType expected_reply, const TransportOptions& options) {
  std::vector<std::size_t> all(size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  return ExchangeWith(all, frames, header, expected_reply, options);
}

std::chrono::steady_clock::duration ServerSet::FirstResendSilence(
    std::size_t request_bytes, wire::MessageType expected_reply,
    const TransportOptions& options) const {
  using Clock = std::chrono::steady_clock;
  // The reply is taken to be as large as the last one of its type (a
  // retrieval's answer is a whole slot however small the request), or as the
  // request if none came yet.
  const auto last_reply = impl_->reply_bytes.find(static_cast<int>(expected_reply));
  const double reply_guess = last_reply != impl_->reply_bytes.end()
                                 ? static_cast<double>(last_reply->second)
                                 : static_cast<double>(request_bytes);
  const double expected_s =
      std::min(4.0 * (impl_->round_trip_s +
                      impl_->seconds_per_byte * (static_cast<double>(request_bytes) + reply_guess)),
               std::chrono::duration<double>(options.deadline).count());
  return std::max<Clock::duration>(
      options.resend_after,
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(expected_s)));
}

Result<std::vector<wire::Message>> ServerSet::ExchangeWith(
    const std::vector<std::size_t>& servers, const std::vector<std::vector<std::uint8_t>>& frames,
    const wire::Header& header, wire::MessageType expected_reply, const TransportOptions& options) {
  using Clock = std::chrono::steady_clock;
  const std::size_t n = servers.size();
  if (frames.size() != n) return Status::InvalidArgument("one frame per server expected");

  auto send = [&](std::size_t k) -> Status {
    void* s = impl_->sockets.at(servers[k]);
    if (zmq_send(s, frames[k].data(), frames[k].size(), 0) < 0) {
      return Status::IoError(ZmqError(("sending to " + impl_->endpoints[servers[k]]).c_str()));
    }
    stats_.bytes_sent += frames[k].size();
    return Status::Ok();
  };

  // When to send a request again. TCP delivers what was sent on a live
  // connection, so a resend only helps when the connection it went out on was
  // replaced (the server restarted or the network dropped it; the monitor
  // counts the handshakes): then at once. As a safety net it also resends
  // after a silence that scales with the link: resend_after, or four times
  // what the request and its reply should take (a round trip plus their
  // bytes at the pace of the earlier exchanges) if that is longer (a
  // request of hundreds of KB takes
  // seconds on a home uplink, and resending it then would only queue a
  // duplicate behind it), doubling after every resend.
  std::size_t request_bytes = 0;
  for (const auto& f : frames) request_bytes += f.size();
  const Clock::duration first_silence = FirstResendSilence(request_bytes, expected_reply, options);

  // What is known of each server's exchange, by position in `servers`.
  struct Progress {
    bool done = false;
    Clock::time_point sent_at;
    Clock::duration silence;    // resend when nothing came for this long
    std::uint64_t sent_on = 0;  // connections[i] when last sent
    Status decode_error;
  };
  std::vector<wire::Message> replies(n);
  std::vector<Progress> progress(n);
  for (Progress& pr : progress) pr.silence = first_silence;
  std::uint64_t reply_bytes_before = stats_.bytes_received;
  bool reconnect_seen = false;
  for (std::size_t k = 0; k < n; ++k) impl_->Drain(servers[k]);
  const auto start = Clock::now();
  for (std::size_t k = 0; k < n; ++k) {
    S3ORAM_RETURN_IF_ERROR(send(k));
    progress[k].sent_at = start;
    progress[k].sent_on = impl_->connections[servers[k]];
  }

  std::size_t remaining = n;
  std::vector<zmq_pollitem_t> items(n);
  while (remaining > 0) {
    const auto now = Clock::now();
    if (now - start >= options.deadline) {
      std::string who;
      for (std::size_t k = 0; k < n; ++k) {
        if (progress[k].done) continue;
        if (!who.empty()) who += ", ";
        who += impl_->endpoints[servers[k]];
        if (!progress[k].decode_error.ok()) who += " (" + progress[k].decode_error.ToString() + ")";
        if (!impl_->handshake_ok[servers[k]]) who += " (no CURVE handshake completed)";
      }
      return Status::Unavailable("timeout: " + who + " did not answer within " +
                                 std::to_string(options.deadline.count()) + " ms (no " +
                                 wire::MessageTypeName(expected_reply) +
                                 "); the server is down, hung or unreachable");
    }
    // A refused or failed CURVE handshake will not heal by waiting: report it.
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = servers[k];
      impl_->Drain(i);
      if (!progress[k].done && !impl_->handshake_errors[i].empty()) {
        return Status::PermissionDenied("server " + std::to_string(i) + " (" + impl_->endpoints[i] +
                                        "): " + impl_->handshake_errors[i]);
      }
    }
    // Resend where the connection was replaced since the send (a request
    // queued before the first connection goes out on it: not a reason), or
    // after the silence above.
    auto next_wake = start + options.deadline;
    for (std::size_t k = 0; k < n; ++k) {
      Progress& pr = progress[k];
      if (pr.done) continue;
      const std::uint64_t conns = impl_->connections[servers[k]];
      const bool reconnected = conns > std::max<std::uint64_t>(pr.sent_on, 1);
      if (reconnected || now - pr.sent_at >= pr.silence) {
        S3ORAM_RETURN_IF_ERROR(send(k));
        stats_.bytes_resent += frames[k].size();
        if (!reconnected) pr.silence = std::min<Clock::duration>(2 * pr.silence, options.deadline);
        if (reconnected) reconnect_seen = true;
        pr.sent_at = now;
        pr.sent_on = conns;
        ++stats_.resends;
      }
      next_wake = std::min(next_wake, pr.sent_at + pr.silence);
    }
    for (std::size_t k = 0; k < n; ++k) {
      items[k] = zmq_pollitem_t{impl_->sockets[servers[k]], 0,
                                progress[k].done ? short{0} : short{ZMQ_POLLIN}, 0};
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_wake - Clock::now());
    long timeout_ms = std::max<long>(1, static_cast<long>(wait.count()));
    // Wake up at least every 100 ms to look at the monitors.
    int rc = zmq_poll(items.data(), static_cast<int>(n), std::min<long>(timeout_ms, 100));
    if (rc < 0) {
      if (zmq_errno() == EINTR) continue;
      return Status::IoError(ZmqError("zmq_poll"));
    }
    for (std::size_t k = 0; k < n; ++k) {
      if (progress[k].done || !(items[k].revents & ZMQ_POLLIN)) continue;
      if (DrainReplies(impl_->sockets[servers[k]], header, expected_reply, &replies[k],
                       &stats_.bytes_received, &progress[k].decode_error)) {
        progress[k].done = true;
        --remaining;
      }
    }
  }

  // Learn the link's pace, timed from the first send: the round trip from
  // small exchanges (under 64 KiB), the time per byte beyond it from large
  // ones. An exchange that was resent on a silence counts too (an
  // overestimate, which only makes the next resends later); one that met a
  // reconnection does not (an outage says nothing of the link).
  const std::uint64_t received = stats_.bytes_received - reply_bytes_before;
  impl_->reply_bytes[static_cast<int>(expected_reply)] = received;
  const double exchanged = static_cast<double>(request_bytes + received);
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  auto smooth = [](double old, double sample) {
    return old == 0 ? sample : 0.75 * old + 0.25 * sample;
  };
  if (!reconnect_seen && exchanged < 64.0 * 1024) {
    impl_->round_trip_s = smooth(impl_->round_trip_s, took);
  } else if (!reconnect_seen) {
    impl_->seconds_per_byte =
        smooth(impl_->seconds_per_byte, std::max(0.0, took - impl_->round_trip_s) / exchanged);
  }
  // The first error by server order, except that a server reporting damaged
  // storage wins: it is the cause, and the others' errors are often its
  // consequence (peers time out waiting for the SMP shares of a server that
  // refused an eviction), which a caller would otherwise retry.
  std::optional<std::size_t> first_error;
  for (std::size_t k = 0; k < n; ++k) {
    const auto* err = std::get_if<wire::ErrorReply>(&replies[k].body);
    if (err == nullptr) continue;
    if (!first_error) first_error = k;
    if (err->code == static_cast<std::uint32_t>(Status::Code::kDamaged)) {
      first_error = k;
      break;
    }
  }
  if (first_error) {
    const std::size_t k = *first_error;
    return wire::StatusFromError(std::get<wire::ErrorReply>(replies[k].body))
        .WithContext("server " + std::to_string(servers[k]) + " (" +
                     impl_->endpoints[servers[k]] + ")");
  }
  return replies;
}

}  // namespace s3oram

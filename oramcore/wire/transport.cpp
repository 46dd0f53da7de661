#include "oramcore/wire/transport.h"

#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace s3oram {

namespace {

std::string ZmqError(const char* what) {
  return std::string(what) + ": " + zmq_strerror(zmq_errno());
}

// Receives every pending frame on `socket` without blocking, and hands each
// that answers one of the outstanding requests (same seq; its expected type
// or an error) to `accept(seq, message, bytes)`, which says whether it was
// wanted. Late replies to earlier requests are dropped.
void DrainReplies(void* socket,
                  const std::function<bool(wire::Message&, std::size_t)>& accept,
                  Status* decode_error) {
  for (;;) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    int n = zmq_msg_recv(&msg, socket, ZMQ_DONTWAIT);
    if (n < 0) {
      zmq_msg_close(&msg);
      return;
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
    accept(decoded.value(), size);
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

struct NetworkServerSet::Impl {
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

NetworkServerSet::~NetworkServerSet() = default;

Result<std::unique_ptr<NetworkServerSet>> NetworkServerSet::Connect(
    const std::vector<std::string>& endpoints, const std::vector<std::string>& server_keys,
    const CurveKeypair& client, std::uint64_t max_reply_bytes) {
  if (max_reply_bytes == 0 || max_reply_bytes > std::uint64_t{INT64_MAX}) {
    return Status::InvalidArgument("a reply size limit must be positive");
  }
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
  std::unique_ptr<NetworkServerSet> set(new NetworkServerSet());
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
    // Sends are never dropped or refused (the client has at most a pipelined
    // batch outstanding per server, its own data); what a server may make
    // this process buffer is bounded: frames by size, the queue by count.
    int send_hwm = 0, receive_hwm = kReceiveQueue;
    const std::int64_t max_frame = static_cast<std::int64_t>(max_reply_bytes);
    if (zmq_setsockopt(s, ZMQ_SNDHWM, &send_hwm, sizeof send_hwm) != 0 ||
        zmq_setsockopt(s, ZMQ_RCVHWM, &receive_hwm, sizeof receive_hwm) != 0 ||
        zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max_frame, sizeof max_frame) != 0) {
      return Status::IoError(ZmqError("bounding the receive queue"));
    }
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

std::size_t NetworkServerSet::size() const { return impl_->sockets.size(); }
const std::string& NetworkServerSet::endpoint(std::size_t i) const {
  return impl_->endpoints.at(i);
}

Result<std::unique_ptr<ServerSet>> ConnectOverNetwork(const ServerAddresses& addresses) {
  S3ORAM_ASSIGN_OR_RETURN(CurveKeypair client_key, LoadCurveKeypair(addresses.client_key_file));
  S3ORAM_ASSIGN_OR_RETURN(
      auto set, NetworkServerSet::Connect(addresses.endpoints, addresses.server_keys, client_key,
                                          addresses.max_reply_bytes));
  return std::unique_ptr<ServerSet>(std::move(set));
}

Result<std::unique_ptr<ServerSet>> ConnectServers(const ServerConnector& connector,
                                                  const ServerAddresses& addresses) {
  return connector ? connector(addresses) : ConnectOverNetwork(addresses);
}

std::chrono::steady_clock::duration NetworkServerSet::FirstResendSilence(
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

std::vector<Result<std::vector<wire::Message>>> NetworkServerSet::ExchangeViews(
    const std::vector<std::size_t>& servers, const std::vector<RequestView>& requests,
    const TransportOptions& options) {
  using Clock = std::chrono::steady_clock;
  const std::size_t n = servers.size();
  const std::size_t count = requests.size();
  std::vector<Result<std::vector<wire::Message>>> results;
  auto fail_all = [&](const Status& st) {
    results.clear();
    for (std::size_t r = 0; r < count; ++r) results.emplace_back(st);
    return results;
  };
  for (const RequestView& o : requests) {
    if (o.frames->size() != n) {
      return fail_all(Status::InvalidArgument("one frame per server expected"));
    }
  }
  if (count == 0) return results;

  auto send = [&](std::size_t r, std::size_t k) -> Status {
    void* s = impl_->sockets.at(servers[k]);
    const auto& f = (*requests[r].frames)[k];
    // Never blocks: a DEALER with no live connection (the server dropped
    // it, e.g. for a frame over a limit, and ZeroMQ has not reconnected yet)
    // would block a send forever. Such a request counts as sent and lost;
    // the resend after silence, bounded by the deadline, covers it.
    if (zmq_send(s, f.data(), f.size(), ZMQ_DONTWAIT) < 0) {
      if (zmq_errno() == EAGAIN) return Status::Ok();
      return Status::IoError(ZmqError(("sending to " + impl_->endpoints[servers[k]]).c_str()));
    }
    stats_.bytes_sent += f.size();
    return Status::Ok();
  };

  // When to send a request again. TCP delivers what was sent on a live
  // connection, so a resend only helps when the connection it went out on was
  // replaced (the server restarted or the network dropped it; the monitor
  // counts the handshakes): then at once, every request of that server not
  // answered yet, in order. As a safety net it also resends after a silence
  // that scales with the link: resend_after, or four times what the request
  // and its reply should take (a round trip plus their bytes at the pace of
  // the earlier exchanges) if that is longer (a request of hundreds of KB
  // takes seconds on a home uplink, and resending it then would only queue a
  // duplicate behind it), doubling after every resend. A server answers its
  // requests in order, so only the first unanswered one of each server can
  // be silent; the silence and the deadline of the next one start when the
  // one before it is answered.
  std::size_t total_request_bytes = 0;
  std::vector<Clock::duration> first_silence(count);
  for (std::size_t r = 0; r < count; ++r) {
    std::size_t bytes = 0;
    for (const auto& f : *requests[r].frames) bytes += f.size();
    total_request_bytes += bytes;
    first_silence[r] = FirstResendSilence(bytes, requests[r].expected_reply, options);
  }

  // What is known of each server's exchange of each request.
  struct Progress {
    bool done = false;
    Clock::time_point sent_at;   // last send, or when the request before it was answered
    Clock::time_point due_from;  // the deadline counts from here: the start, or that answer
    Clock::duration silence;    // resend when nothing came for this long
    std::uint64_t sent_on = 0;  // connections[i] when last sent
    Status decode_error;
    wire::Message reply;
  };
  std::vector<std::vector<Progress>> progress(count, std::vector<Progress>(n));
  std::vector<std::size_t> first_open(n, 0);  // per server: first request not answered
  for (std::size_t r = 0; r < count; ++r) {
    for (Progress& pr : progress[r]) pr.silence = first_silence[r];
  }
  std::map<std::uint64_t, std::size_t> by_seq;
  for (std::size_t r = 0; r < count; ++r) by_seq[requests[r].header.seq] = r;
  const std::uint64_t reply_bytes_before = stats_.bytes_received;
  bool reconnect_seen = false;
  for (std::size_t k = 0; k < n; ++k) impl_->Drain(servers[k]);
  const auto start = Clock::now();
  for (std::size_t k = 0; k < n; ++k) {
    for (std::size_t r = 0; r < count; ++r) {
      if (Status st = send(r, k); !st.ok()) return fail_all(st);
      progress[r][k].sent_at = progress[r][k].due_from = start;
      progress[r][k].sent_on = impl_->connections[servers[k]];
    }
  }
  // A server's requests from `from` on that can no longer be answered.
  std::vector<std::optional<Status>> failed(count);
  auto fail_from = [&](std::size_t k, std::size_t from, const Status& st) {
    for (std::size_t r = from; r < count; ++r) {
      if (!progress[r][k].done && !failed[r]) failed[r] = st;
    }
    first_open[k] = count;
  };

  // Moves server k past the requests it answered and those another server
  // failed (nothing it says about them counts); the next one's silence and
  // deadline start now.
  auto advance = [&](std::size_t k) {
    std::size_t r = first_open[k];
    while (r < count && (progress[r][k].done || failed[r])) ++r;
    if (r != first_open[k] && r < count) {
      const auto now = Clock::now();
      progress[r][k].sent_at = std::max(progress[r][k].sent_at, now);
      progress[r][k].due_from = std::max(progress[r][k].due_from, now);
    }
    first_open[k] = std::max(first_open[k], r);
  };

  std::vector<zmq_pollitem_t> items(n);
  std::vector<std::size_t> polled(n);
  for (;;) {
    for (std::size_t k = 0; k < n; ++k) advance(k);
    std::size_t open_servers = 0;
    for (std::size_t k = 0; k < n; ++k) open_servers += first_open[k] < count ? 1 : 0;
    if (open_servers == 0) break;
    const auto now = Clock::now();
    // A refused or failed CURVE handshake will not heal by waiting: report it.
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = servers[k];
      impl_->Drain(i);
      if (first_open[k] < count && !impl_->handshake_errors[i].empty()) {
        fail_from(k, first_open[k],
                  Status::PermissionDenied("server " + std::to_string(i) + " (" +
                                           impl_->endpoints[i] + "): " +
                                           impl_->handshake_errors[i]));
      }
    }
    auto next_wake = now + options.deadline;
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t r0 = first_open[k];
      if (r0 >= count) continue;
      Progress& pr = progress[r0][k];
      if (now - pr.due_from >= options.deadline) {
        std::string who = impl_->endpoints[servers[k]];
        if (!pr.decode_error.ok()) who += " (" + pr.decode_error.ToString() + ")";
        if (!impl_->handshake_ok[servers[k]]) who += " (no CURVE handshake completed)";
        fail_from(k, r0,
                  Status::Unavailable("timeout: " + who + " did not answer within " +
                                      std::to_string(options.deadline.count()) + " ms (no " +
                                      wire::MessageTypeName(requests[r0].expected_reply) +
                                      "); the server is down, hung or unreachable"));
        continue;
      }
      // Resend where the connection was replaced since the send (a request
      // queued before the first connection goes out on it: not a reason):
      // everything unanswered, in order; or the first after the silence.
      const std::uint64_t conns = impl_->connections[servers[k]];
      const bool reconnected = conns > std::max<std::uint64_t>(pr.sent_on, 1);
      if (reconnected || now - pr.sent_at >= pr.silence) {
        const std::size_t last = reconnected ? count : r0 + 1;
        for (std::size_t r = r0; r < last; ++r) {
          Progress& p = progress[r][k];
          if (p.done) continue;
          if (Status st = send(r, k); !st.ok()) return fail_all(st);
          stats_.bytes_resent += (*requests[r].frames)[k].size();
          ++stats_.resends;
          if (!reconnected) p.silence = std::min<Clock::duration>(2 * p.silence, options.deadline);
          p.sent_on = conns;
          if (r == r0) p.sent_at = now;
        }
        if (reconnected) reconnect_seen = true;
      }
      next_wake = std::min({next_wake, pr.sent_at + pr.silence, pr.due_from + options.deadline});
    }
    std::size_t polling = 0;
    for (std::size_t k = 0; k < n; ++k) {
      if (first_open[k] >= count) continue;
      items[polling] = zmq_pollitem_t{impl_->sockets[servers[k]], 0, short{ZMQ_POLLIN}, 0};
      polled[polling++] = k;
    }
    if (polling == 0) break;
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_wake - Clock::now());
    long timeout_ms = std::max<long>(1, static_cast<long>(wait.count()));
    // Wake up at least every 100 ms to look at the monitors.
    int rc = zmq_poll(items.data(), static_cast<int>(polling), std::min<long>(timeout_ms, 100));
    if (rc < 0) {
      if (zmq_errno() == EINTR) continue;
      return fail_all(Status::IoError(ZmqError("zmq_poll")));
    }
    for (std::size_t q = 0; q < polling; ++q) {
      if (!(items[q].revents & ZMQ_POLLIN)) continue;
      const std::size_t k = polled[q];
      Status* decode_error = &progress[first_open[k]][k].decode_error;
      DrainReplies(
          impl_->sockets[servers[k]],
          [&](wire::Message& m, std::size_t size) {
            const auto it = by_seq.find(m.header.seq);
            if (it == by_seq.end()) return false;  // late reply to an earlier request
            const std::size_t r = it->second;
            Progress& p = progress[r][k];
            if (p.done || failed[r]) return false;
            if (m.header.type != requests[r].expected_reply &&
                m.header.type != wire::MessageType::kError) {
              *decode_error = Status::Protocol(
                  std::string("unexpected reply type ") + wire::MessageTypeName(m.header.type) +
                  ", wanted " + wire::MessageTypeName(requests[r].expected_reply));
              return false;
            }
            stats_.bytes_received += size;
            p.reply = std::move(m);
            p.done = true;
            return true;
          },
          decode_error);
      advance(k);
    }
  }

  // Learn the link's pace, timed from the first send: the round trip from
  // small exchanges (under 64 KiB), the time per byte beyond it from large
  // ones. An exchange that was resent on a silence counts too (an
  // overestimate, which only makes the next resends later); one that met a
  // reconnection does not (an outage says nothing of the link).
  bool all_done = true;
  for (std::size_t r = 0; r < count; ++r) all_done &= !failed[r];
  if (all_done) {
    const std::uint64_t received = stats_.bytes_received - reply_bytes_before;
    impl_->reply_bytes[static_cast<int>(requests.back().expected_reply)] = received / count;
    const double exchanged = static_cast<double>(total_request_bytes + received);
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    auto smooth = [](double old, double sample) {
      return old == 0 ? sample : 0.75 * old + 0.25 * sample;
    };
    if (!reconnect_seen && count == 1 && exchanged < 64.0 * 1024) {
      impl_->round_trip_s = smooth(impl_->round_trip_s, took);
    } else if (!reconnect_seen) {
      impl_->seconds_per_byte =
          smooth(impl_->seconds_per_byte, std::max(0.0, took - impl_->round_trip_s) / exchanged);
    }
  }
  for (std::size_t r = 0; r < count; ++r) {
    if (failed[r]) {
      results.emplace_back(*failed[r]);
      continue;
    }
    std::vector<wire::Message> replies(n);
    for (std::size_t k = 0; k < n; ++k) replies[k] = std::move(progress[r][k].reply);
    results.push_back(ResultOfReplies(servers, std::move(replies)));
  }
  return results;
}

}  // namespace s3oram

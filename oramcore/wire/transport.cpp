#include "oramcore/wire/transport.h"

#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "oramcore/wire/liveness_monitor.h"

namespace s3oram {

namespace {

// An exchange this large (requests and replies, every server) teaches the
// link's time per byte; smaller ones of one request its round trip.
constexpr std::size_t kLargeExchangeBytes = 64 * 1024;
// How long a large request sent before the link's pace is known waits
// before its server is checked while no other server answered it
// (Progress::unknown_pace).
constexpr std::chrono::seconds kUnknownPaceSuspectAfter{10};

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
// or the connection dropped mid-handshake) before the client names a wrong
// server key as a likely cause. It is a doubt, not a verdict: a server
// killed behind a TCP relay or proxy (net-bench's paper-home relays, an
// SSH tunnel, a load balancer) looks the same, since the relay accepts the
// connection and drops it. So the server is left to the liveness check,
// whose down verdict carries the doubt, and with servers to spare it is
// excluded like any down server. A refusal by the server's ZAP handler is
// a verdict, reported at once.
constexpr int kHandshakeFailuresBeforeDoubt = 3;

void DrainMonitor(void* monitor, std::string* handshake_error, std::string* handshake_doubt,
                  bool* handshake_ok, int* unexplained_failures, std::uint64_t* connections) {
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
        handshake_doubt->clear();
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        *handshake_error = "the server refused this client's CURVE key (ZAP status " +
                           std::to_string(value) +
                           "): add the client's public key to the server's authorized_clients";
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        if (++*unexplained_failures >= kHandshakeFailuresBeforeDoubt) {
          *handshake_doubt =
              "its CURVE handshake failed " + std::to_string(*unexplained_failures) +
              " times in a row: the connection is dropped before the handshake ends, as a TCP "
              "relay or proxy in front of a stopped server does, or the server's public key in "
              "the client state does not match it (or it is not an s3oram server)";
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
  std::vector<std::string> handshake_errors;  // a CURVE refusal per server, if any
  std::vector<std::string> handshake_doubts;  // failed handshakes without a verdict
  std::vector<bool> handshake_ok;
  std::vector<int> handshake_failures;     // consecutive, without an auth verdict
  std::vector<std::uint64_t> connections;  // handshakes completed so far, per server
  // Smoothed seconds per byte of the large exchanges beyond the round trip
  // (request and reply bytes of all servers); 0 until one was.
  double seconds_per_byte = 0;
  bool pace_learned = false;                 // a large exchange was timed
  double round_trip_s = 0;                   // smoothed duration of the small exchanges
  std::map<int, std::uint64_t> reply_bytes;  // last exchange's reply bytes, by reply type
  // Tells a down server from a slow one (wire/liveness_monitor.h).
  std::unique_ptr<LivenessMonitor> liveness;
  // When this client's connection to each server last completed a
  // handshake, as far as Drain has seen (a restarted server connects anew).
  std::vector<std::chrono::steady_clock::time_point> handshake_seen;

  // A request a Wait::kQuorum call left a server answering (server_set.h):
  // kept, with a copy of its frame, until its end is handed out.
  struct LagEntry {
    std::uint64_t seq = 0;
    wire::MessageType expected_reply = wire::MessageType::kError;
    std::vector<std::uint8_t> frame;
    // Its deadline counts from here: when it was sent, or when the server
    // answered the request before it.
    std::chrono::steady_clock::time_point due_from;
    std::chrono::milliseconds deadline{0};
    std::uint64_t sent_on = 0;                 // connections[i] when last sent
    std::optional<Result<wire::Message>> end;  // its reply or failure, once known
  };
  // Per server, in the order sent.
  std::vector<std::deque<LagEntry>> lagging;

  std::size_t OpenLagging(std::size_t i) const {
    std::size_t open = 0;
    for (const LagEntry& e : lagging[i]) open += e.end ? 0 : 1;
    return open;
  }
  LagEntry* FirstOpenLagging(std::size_t i) {
    for (LagEntry& e : lagging[i]) {
      if (!e.end) return &e;
    }
    return nullptr;
  }

  // A reply from server i that ends one of its lagging requests (same seq,
  // the expected type or an error): kept, and the next one's deadline
  // starts now. False if it ends none.
  bool AcceptLagged(std::size_t i, wire::Message& m) {
    for (auto it = lagging[i].begin(); it != lagging[i].end(); ++it) {
      if (it->end || it->seq != m.header.seq) continue;
      if (m.header.type != it->expected_reply && m.header.type != wire::MessageType::kError) {
        return false;
      }
      it->end = std::move(m);
      const auto now = std::chrono::steady_clock::now();
      for (auto next = std::next(it); next != lagging[i].end(); ++next) {
        if (!next->end) {
          next->due_from = std::max(next->due_from, now);
          break;
        }
      }
      return true;
    }
    return false;
  }

  // Every open lagging request of server i fails with `st`.
  void FailLagging(std::size_t i, const Status& st) {
    for (LagEntry& e : lagging[i]) {
      if (!e.end) e.end = Result<wire::Message>(st);
    }
  }

  // The verdict that server i is down, if it still holds: a check it failed
  // after its connection's latest handshake. A server that connected since
  // its last failed check (restarted, or its network is back) may be up: it
  // is checked again, and requests go to it meanwhile.
  std::optional<ServerDown> DownNow(std::size_t i) {
    auto down = liveness->Down(i);
    if (!down) return std::nullopt;
    Drain(i);
    if (handshake_seen[i] > down->last_failed_check) {
      liveness->Check(i);
      return std::nullopt;
    }
    return down;
  }

  // DownStatus of server i (its verdict's reason carries the handshakes'
  // doubt, if any: Drain notes it with the monitor).
  Status DownStatusOf(std::size_t i, const ServerDown& down) {
    return DownStatus(i, endpoints[i], down);
  }

  void Drain(std::size_t i) {
    bool ok = handshake_ok[i];
    const std::uint64_t before = connections[i];
    const std::string doubt_before = handshake_doubts[i];
    DrainMonitor(monitors[i], &handshake_errors[i], &handshake_doubts[i], &ok,
                 &handshake_failures[i], &connections[i]);
    handshake_ok[i] = ok;
    if (handshake_doubts[i] != doubt_before) liveness->NoteDoubt(i, handshake_doubts[i]);
    if (connections[i] != before) handshake_seen[i] = std::chrono::steady_clock::now();
  }

  ~Impl() {
    liveness.reset();  // its sockets closed before the context ends
    for (void* s : sockets) zmq_close(s);
    for (void* m : monitors) zmq_close(m);
    if (context) zmq_ctx_term(context);
  }
};

NetworkServerSet::~NetworkServerSet() = default;

Result<std::unique_ptr<NetworkServerSet>> NetworkServerSet::Connect(
    const std::vector<std::string>& endpoints, const std::vector<std::string>& server_keys,
    const CurveKeypair& client, std::uint64_t max_reply_bytes, bool log_liveness) {
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
    impl.handshake_doubts.emplace_back();
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
  std::vector<LivenessMonitor::Target> targets;
  for (std::size_t i = 0; i < endpoints.size(); ++i)
    targets.push_back({endpoints[i], server_keys[i]});
  impl.liveness =
      std::make_unique<LivenessMonitor>(impl.context, std::move(targets), client.public_key,
                                        Secret::CopyOf(secret_bin.bytes()), log_liveness);
  impl.handshake_seen.assign(endpoints.size(), std::chrono::steady_clock::time_point{});
  impl.lagging.resize(endpoints.size());
  return set;
}

std::size_t NetworkServerSet::size() const { return impl_->sockets.size(); }
std::optional<ServerDown> NetworkServerSet::Down(std::size_t i) const {
  return impl_->liveness->Down(i);
}
const std::string& NetworkServerSet::endpoint(std::size_t i) const {
  return impl_->endpoints.at(i);
}

Result<std::unique_ptr<ServerSet>> ConnectOverNetwork(const ServerAddresses& addresses) {
  S3ORAM_ASSIGN_OR_RETURN(CurveKeypair client_key, LoadCurveKeypair(addresses.client_key_file));
  S3ORAM_ASSIGN_OR_RETURN(
      auto set, NetworkServerSet::Connect(addresses.endpoints, addresses.server_keys, client_key,
                                          addresses.max_reply_bytes, addresses.log_liveness));
  return std::unique_ptr<ServerSet>(std::move(set));
}

Result<std::unique_ptr<ServerSet>> ConnectServers(const ServerConnector& connector,
                                                  const ServerAddresses& addresses) {
  return connector ? connector(addresses) : ConnectOverNetwork(addresses);
}

std::chrono::steady_clock::duration NetworkServerSet::ExpectedTransfer(
    std::size_t request_bytes, wire::MessageType expected_reply) const {
  // The reply is taken to be as large as the last one of its type (a
  // retrieval's answer is a whole slot however small the request), or as the
  // request if none came yet.
  const auto last_reply = impl_->reply_bytes.find(static_cast<int>(expected_reply));
  const double reply_guess = last_reply != impl_->reply_bytes.end()
                                 ? static_cast<double>(last_reply->second)
                                 : static_cast<double>(request_bytes);
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(impl_->round_trip_s +
                                    impl_->seconds_per_byte *
                                        (static_cast<double>(request_bytes) + reply_guess)));
}

std::chrono::steady_clock::duration NetworkServerSet::FirstResendSilence(
    std::size_t request_bytes, wire::MessageType expected_reply,
    const TransportOptions& options) const {
  using Clock = std::chrono::steady_clock;
  const double expected_s = std::min(
      4.0 * std::chrono::duration<double>(ExpectedTransfer(request_bytes, expected_reply)).count(),
      std::chrono::duration<double>(options.deadline).count());
  return std::max<Clock::duration>(
      options.resend_after,
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(expected_s)));
}

// One call of ExchangeAnswers: every request's progress on every server of
// the subset, from the first send to the answers.
//
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
class NetworkServerSet::OneExchange {
 public:
  using Clock = std::chrono::steady_clock;

  OneExchange(NetworkServerSet& set, const std::vector<std::size_t>& servers,
              const std::vector<RequestView>& requests, const TransportOptions& options, Wait wait)
      : set_(set),
        impl_(*set.impl_),
        servers_(servers),
        requests_(requests),
        options_(options),
        wait_(wait),
        n_(servers.size()),
        count_(requests.size()),
        progress_(count_, std::vector<Progress>(n_)),
        first_open_(n_, 0),
        abandoned_(count_),
        quorum_(wait == Wait::kQuorum && options.quorum > 0 ? std::min(options.quorum, n_) : n_) {}

  std::vector<Answers> Run() {
    for (const RequestView& o : requests_) {
      if (o.frames->size() != n_)
        return FailAll(Status::InvalidArgument("one frame per server expected"));
    }
    if (count_ == 0) return {};
    // A server known to be down fails at once: under kEvery nothing is sent
    // to anyone (no server applies what could not be applied everywhere).
    std::size_t down_servers = 0;
    for (std::size_t k = 0; k < n_; ++k) {
      const std::size_t i = servers_[k];
      if (auto down = impl_.DownNow(i)) {
        const Status st = impl_.DownStatusOf(i, *down);
        if (wait_ == Wait::kEvery || (wait_ == Wait::kQuorum && ++down_servers > n_ - quorum_)) {
          return FailAll(st);
        }
        FailFrom(k, 0, st);
      }
    }
    if (Status st = SendAll(); !st.ok()) return FailAll(st);
    for (;;) {
      for (std::size_t k = 0; k < n_; ++k) Advance(k);
      if (wait_ == Wait::kQuorum && QuorumMet()) break;
      std::size_t open_servers = 0;
      for (std::size_t k = 0; k < n_; ++k) open_servers += first_open_[k] < count_ ? 1 : 0;
      if (open_servers == 0) break;
      FailRefusedHandshakes();
      auto next_wake = Clock::now() + options_.deadline;
      if (Status st = ExpireAndResend(next_wake); !st.ok()) return FailAll(st);
      if (Status st = PollReplies(next_wake); !st.ok()) return FailAll(st);
    }
    LearnPace();
    return TakeAnswers();
  }

 private:
  // What is known of each server's exchange of each request.
  struct Progress {
    bool done = false;
    Clock::time_point sent_at;   // last send, or when the request before it was answered
    Clock::time_point due_from;  // the deadline counts from here: the start, or that answer
    Clock::duration silence;    // resend when nothing came for this long
    // What it should take at the learned pace: its server is not suspected
    // before twice that (a home uplink takes seconds for a large request,
    // and a check sent meanwhile would queue behind it).
    Clock::duration expected{};
    // A large request sent before any large exchange was timed: `expected`
    // knows nothing of the link. Its server is suspected once another
    // server answered the same request, or after kUnknownPaceSuspectAfter:
    // on a slow uplink every server is silent until the upload is through,
    // and a check then would queue behind it and call them all down.
    bool unknown_pace = false;
    std::uint64_t sent_on = 0;  // connections[i] when last sent
    Status decode_error;
    wire::Message reply;
    std::optional<Status> failure;  // this server's own
    Clock::time_point ended;        // when the reply or the failure came
  };

  std::vector<Answers> FailAll(const Status& st) const {
    return std::vector<Answers>(count_, Answers(n_, Answer{st, {}}));
  }

  // Request r is settled for server k: answered, failed there, or (kEvery)
  // abandoned after another server failed it.
  bool Settled(std::size_t r, std::size_t k) const {
    const Progress& p = progress_[r][k];
    return p.done || p.failure || abandoned_[r];
  }

  Status Send(std::size_t r, std::size_t k) {
    void* s = impl_.sockets.at(servers_[k]);
    const auto& f = (*requests_[r].frames)[k];
    // Never blocks: a DEALER with no live connection (the server dropped
    // it, e.g. for a frame over a limit, and ZeroMQ has not reconnected yet)
    // would block a send forever. Such a request counts as sent and lost;
    // the resend after silence, bounded by the deadline, covers it.
    if (zmq_send(s, f.data(), f.size(), ZMQ_DONTWAIT) < 0) {
      if (zmq_errno() == EAGAIN) return Status::Ok();
      return Status::IoError(ZmqError(("sending to " + impl_.endpoints[servers_[k]]).c_str()));
    }
    set_.stats_.bytes_sent += f.size();
    return Status::Ok();
  }

  // Every request to every server, in order, each with its first silence.
  Status SendAll() {
    for (std::size_t r = 0; r < count_; ++r) {
      std::size_t bytes = 0;
      for (const auto& f : *requests_[r].frames) bytes += f.size();
      total_request_bytes_ += bytes;
      const auto silence = set_.FirstResendSilence(bytes, requests_[r].expected_reply, options_);
      const auto expected = set_.ExpectedTransfer(bytes, requests_[r].expected_reply);
      for (Progress& pr : progress_[r]) {
        pr.silence = silence;
        pr.expected = expected;
        pr.unknown_pace = !impl_.pace_learned && bytes >= kLargeExchangeBytes;
      }
      by_seq_[requests_[r].header.seq] = r;
    }
    reply_bytes_before_ = set_.stats_.bytes_received;
    for (std::size_t k = 0; k < n_; ++k) {
      impl_.Drain(servers_[k]);
      // A server's lagging requests go before this call's, also on a
      // connection that replaced theirs since.
      if (first_open_[k] < count_) S3ORAM_RETURN_IF_ERROR(set_.ResendLagging(servers_[k]));
    }
    start_ = Clock::now();
    for (std::size_t k = 0; k < n_; ++k) {
      if (first_open_[k] >= count_) continue;  // known down
      for (std::size_t r = 0; r < count_; ++r) {
        S3ORAM_RETURN_IF_ERROR(Send(r, k));
        progress_[r][k].sent_at = progress_[r][k].due_from = start_;
        progress_[r][k].sent_on = impl_.connections[servers_[k]];
      }
    }
    return Status::Ok();
  }

  // Server k's requests from `from` on can no longer be answered (under
  // kEvery, nobody's answers to them count any more).
  // Its lagging requests, sent before, fail with them.
  void FailFrom(std::size_t k, std::size_t from, const Status& st) {
    const auto now = Clock::now();
    impl_.FailLagging(servers_[k], st);
    for (std::size_t r = from; r < count_; ++r) {
      if (Settled(r, k)) continue;
      progress_[r][k].failure = st;
      progress_[r][k].ended = now;
      if (wait_ == Wait::kEvery) abandoned_[r] = st;
      if (wait_ == Wait::kQuorum && !abandoned_[r]) {
        std::size_t failed = 0;
        for (const Progress& p : progress_[r]) failed += p.failure ? 1 : 0;
        if (failed > n_ - quorum_) abandoned_[r] = st;
      }
    }
    first_open_[k] = count_;
  }

  // kQuorum: every request answered by quorum_ servers (or failed), and no
  // server left with more than kMaxLagging requests lagging.
  bool QuorumMet() const {
    for (std::size_t r = 0; r < count_; ++r) {
      if (abandoned_[r]) continue;
      std::size_t answered = 0;
      for (const Progress& p : progress_[r]) answered += p.done ? 1 : 0;
      if (answered < quorum_) return false;
    }
    for (std::size_t k = 0; k < n_; ++k) {
      std::size_t open = 0;
      for (std::size_t r = first_open_[k]; r < count_; ++r) open += Settled(r, k) ? 0 : 1;
      if (open > 0 && impl_.OpenLagging(servers_[k]) + open > kMaxLagging) return false;
    }
    return true;
  }

  // Moves server k past the requests it settled (and, under kEvery, those
  // another server failed: nothing it says about them counts); the next
  // one's silence and deadline start now.
  void Advance(std::size_t k) {
    std::size_t r = first_open_[k];
    while (r < count_ && Settled(r, k)) ++r;
    if (r != first_open_[k] && r < count_) {
      const auto now = Clock::now();
      progress_[r][k].sent_at = std::max(progress_[r][k].sent_at, now);
      progress_[r][k].due_from = std::max(progress_[r][k].due_from, now);
    }
    first_open_[k] = std::max(first_open_[k], r);
  }

  // Another server of the call answered request r.
  bool AnsweredElsewhere(std::size_t r, std::size_t k) const {
    for (std::size_t q = 0; q < n_; ++q) {
      if (q != k && progress_[r][q].done) return true;
    }
    return false;
  }

  // A CURVE key the server refused will not heal by waiting: report it.
  void FailRefusedHandshakes() {
    for (std::size_t k = 0; k < n_; ++k) {
      const std::size_t i = servers_[k];
      impl_.Drain(i);
      if (first_open_[k] < count_ && !impl_.handshake_errors[i].empty()) {
        FailFrom(k, first_open_[k],
                 Status::PermissionDenied("server " + std::to_string(i) + " (" +
                                          impl_.endpoints[i] + "): " + impl_.handshake_errors[i]));
      }
    }
  }

  // Fails each server's first open request past its deadline, resends what
  // a replaced connection or a silence calls for, and brings next_wake
  // forward to the next silence or deadline.
  Status ExpireAndResend(Clock::time_point& next_wake) {
    const auto now = Clock::now();
    const auto suspect_after = impl_.liveness->SuspectAfter();
    for (std::size_t k = 0; k < n_; ++k) {
      const std::size_t r0 = first_open_[k];
      if (r0 >= count_) continue;
      Progress& pr = progress_[r0][k];
      // Open for long: a server that is busy answers a check, one that is
      // stopped, dead or cut off does not, and its requests fail now.
      const std::size_t i = servers_[k];
      Clock::duration suspect = std::max<Clock::duration>(suspect_after, 2 * pr.expected);
      if (pr.unknown_pace && !AnsweredElsewhere(r0, k)) {
        suspect = std::max<Clock::duration>(suspect, kUnknownPaceSuspectAfter);
      }
      if (now - pr.due_from >= suspect) impl_.liveness->Check(i);
      if (auto down = impl_.DownNow(i); down && down->last_failed_check >= start_) {
        FailFrom(k, r0, impl_.DownStatusOf(i, *down));
        continue;
      }
      if (now - pr.due_from >= options_.deadline) {
        std::string who = impl_.endpoints[servers_[k]];
        if (!pr.decode_error.ok()) who += " (" + pr.decode_error.ToString() + ")";
        if (!impl_.handshake_ok[servers_[k]]) who += " (no CURVE handshake completed)";
        if (!impl_.handshake_doubts[servers_[k]].empty()) {
          who += " (" + impl_.handshake_doubts[servers_[k]] + ")";
        }
        FailFrom(k, r0, SilenceStatus(who, options_.deadline, requests_[r0].expected_reply));
        continue;
      }
      // Resend where the connection was replaced since the send (a request
      // queued before the first connection goes out on it: not a reason):
      // everything unanswered, in order; or the first after the silence.
      const std::uint64_t conns = impl_.connections[servers_[k]];
      const bool reconnected = conns > std::max<std::uint64_t>(pr.sent_on, 1);
      if (reconnected || now - pr.sent_at >= pr.silence) {
        if (reconnected) S3ORAM_RETURN_IF_ERROR(set_.ResendLagging(servers_[k]));
        const std::size_t last = reconnected ? count_ : r0 + 1;
        for (std::size_t r = r0; r < last; ++r) {
          Progress& p = progress_[r][k];
          if (p.done) continue;
          S3ORAM_RETURN_IF_ERROR(Send(r, k));
          set_.stats_.bytes_resent += (*requests_[r].frames)[k].size();
          ++set_.stats_.resends;
          if (!reconnected) p.silence = std::min<Clock::duration>(2 * p.silence, options_.deadline);
          p.sent_on = conns;
          if (r == r0) p.sent_at = now;
        }
        if (reconnected) reconnect_seen_ = true;
      }
      next_wake = std::min({next_wake, pr.sent_at + pr.silence, pr.due_from + options_.deadline});
    }
    return Status::Ok();
  }

  // Waits (until next_wake, at most 100 ms: the monitors are looked at in
  // between) for replies and takes every one that answers an open request.
  Status PollReplies(Clock::time_point next_wake) {
    std::vector<zmq_pollitem_t> items;
    std::vector<std::size_t> polled;
    for (std::size_t k = 0; k < n_; ++k) {
      if (first_open_[k] >= count_) continue;
      items.push_back(zmq_pollitem_t{impl_.sockets[servers_[k]], 0, short{ZMQ_POLLIN}, 0});
      polled.push_back(k);
    }
    if (items.empty()) return Status::Ok();
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_wake - Clock::now());
    long timeout_ms = std::max<long>(1, static_cast<long>(wait.count()));
    int rc =
        zmq_poll(items.data(), static_cast<int>(items.size()), std::min<long>(timeout_ms, 100));
    if (rc < 0) {
      if (zmq_errno() == EINTR) return Status::Ok();
      return Status::IoError(ZmqError("zmq_poll"));
    }
    for (std::size_t q = 0; q < items.size(); ++q) {
      if (!(items[q].revents & ZMQ_POLLIN)) continue;
      const std::size_t k = polled[q];
      Status* decode_error = &progress_[first_open_[k]][k].decode_error;
      bool heard = false;
      DrainReplies(
          impl_.sockets[servers_[k]],
          [&](wire::Message& m, std::size_t size) {
            heard = true;
            return Accept(k, m, size, decode_error);
          },
          decode_error);
      // A server that answers on this connection is there, whatever a check
      // queued behind the client's own uploads says.
      if (heard) impl_.liveness->Heard(servers_[k]);
      Advance(k);
    }
    return Status::Ok();
  }

  // A reply from server k: kept if it answers an open request with the
  // expected type (or an error); late replies to earlier requests are dropped.
  bool Accept(std::size_t k, wire::Message& m, std::size_t size, Status* decode_error) {
    const auto it = by_seq_.find(m.header.seq);
    if (it == by_seq_.end()) {
      // One of the server's lagging requests, or a late reply to an
      // earlier request (dropped).
      if (!impl_.AcceptLagged(servers_[k], m)) return false;
      set_.stats_.bytes_received += size;
      return true;
    }
    const std::size_t r = it->second;
    Progress& p = progress_[r][k];
    if (Settled(r, k)) return false;
    if (m.header.type != requests_[r].expected_reply &&
        m.header.type != wire::MessageType::kError) {
      *decode_error = Status::Protocol(std::string("unexpected reply type ") +
                                       wire::MessageTypeName(m.header.type) + ", wanted " +
                                       wire::MessageTypeName(requests_[r].expected_reply));
      return false;
    }
    set_.stats_.bytes_received += size;
    p.reply = std::move(m);
    p.done = true;
    p.ended = Clock::now();
    return true;
  }

  // Learns the link's pace, timed from the first send: the round trip from
  // small exchanges (under 64 KiB) of one request, the time per byte beyond
  // it from large ones. A small exchange of several requests teaches
  // nothing: its time is round trips and the servers' work, and divided by
  // its few bytes it made a pace of a few hundred KB/s on loopback, by which
  // the first root write at a mount (2 MiB on four servers) was expected to
  // take 5 s and a killed server was suspected only 10 s into it. An
  // exchange that was resent on a silence counts too (an overestimate, which
  // only makes the next resends later); one that met a reconnection does
  // not (an outage says nothing of the link).
  void LearnPace() {
    for (std::size_t r = 0; r < count_; ++r) {
      for (std::size_t k = 0; k < n_; ++k) {
        if (!progress_[r][k].done) return;
      }
    }
    const std::uint64_t received = set_.stats_.bytes_received - reply_bytes_before_;
    impl_.reply_bytes[static_cast<int>(requests_.back().expected_reply)] = received / count_;
    const double exchanged = static_cast<double>(total_request_bytes_ + received);
    const double took = std::chrono::duration<double>(Clock::now() - start_).count();
    auto smooth = [](double old, double sample) {
      return old == 0 ? sample : 0.75 * old + 0.25 * sample;
    };
    if (reconnect_seen_) return;
    if (exchanged < static_cast<double>(kLargeExchangeBytes)) {
      if (count_ != 1) return;
      impl_.round_trip_s = smooth(impl_.round_trip_s, took);
      impl_.liveness->SetRoundTrip(std::chrono::duration<double>(impl_.round_trip_s));
    } else {
      impl_.seconds_per_byte =
          smooth(impl_.seconds_per_byte, std::max(0.0, took - impl_.round_trip_s) / exchanged);
      impl_.pace_learned = true;
    }
  }

  std::vector<Answers> TakeAnswers() {
    // kQuorum: what a server has not answered yet lags; the set keeps it,
    // in the order sent.
    std::vector<std::vector<bool>> lags(count_, std::vector<bool>(n_, false));
    for (std::size_t k = 0; k < n_ && wait_ == Wait::kQuorum; ++k) {
      for (std::size_t r = 0; r < count_; ++r) {
        if (Settled(r, k)) continue;
        const Progress& p = progress_[r][k];
        lags[r][k] = true;
        impl_.lagging[servers_[k]].push_back(Impl::LagEntry{
            requests_[r].header.seq, requests_[r].expected_reply, (*requests_[r].frames)[k],
            p.due_from, options_.deadline, p.sent_on, std::nullopt});
      }
    }
    std::vector<Answers> answers(count_);
    for (std::size_t r = 0; r < count_; ++r) {
      answers[r].reserve(n_);
      for (std::size_t k = 0; k < n_; ++k) {
        Progress& p = progress_[r][k];
        // A server known down before anything was sent ended before start_.
        const auto after = std::chrono::duration_cast<std::chrono::microseconds>(std::max(
            Clock::duration::zero(), (p.done || p.failure ? p.ended : Clock::now()) - start_));
        if (abandoned_[r]) {
          // kEvery: the request's one failure for every server.
          answers[r].push_back(Answer{*abandoned_[r], after});
        } else if (lags[r][k]) {
          answers[r].push_back(
              Answer{LaggingStatus(servers_[k], impl_.endpoints[servers_[k]]), after, true});
        } else if (p.failure) {
          answers[r].push_back(Answer{*p.failure, after});
        } else {
          answers[r].push_back(Answer{std::move(p.reply), after});
        }
      }
    }
    return answers;
  }

  NetworkServerSet& set_;
  NetworkServerSet::Impl& impl_;
  const std::vector<std::size_t>& servers_;
  const std::vector<RequestView>& requests_;
  const TransportOptions& options_;
  const Wait wait_;
  const std::size_t n_;
  const std::size_t count_;
  std::vector<std::vector<Progress>> progress_;
  std::vector<std::size_t> first_open_;  // per server: first request not answered
  std::vector<std::optional<Status>> abandoned_;  // kEvery/kQuorum: the request's failure
  const std::size_t quorum_;                      // kQuorum: answers each request needs (else n_)
  std::map<std::uint64_t, std::size_t> by_seq_;
  std::size_t total_request_bytes_ = 0;
  std::uint64_t reply_bytes_before_ = 0;
  Clock::time_point start_;
  bool reconnect_seen_ = false;
};

Status NetworkServerSet::ResendLagging(std::size_t i) {
  Impl& impl = *impl_;
  const std::uint64_t conns = impl.connections[i];
  for (Impl::LagEntry& e : impl.lagging[i]) {
    if (e.end || conns <= std::max<std::uint64_t>(e.sent_on, 1)) continue;
    if (zmq_send(impl.sockets[i], e.frame.data(), e.frame.size(), ZMQ_DONTWAIT) < 0 &&
        zmq_errno() != EAGAIN) {
      return Status::IoError(ZmqError(("sending to " + impl.endpoints[i]).c_str()));
    }
    stats_.bytes_sent += e.frame.size();
    stats_.bytes_resent += e.frame.size();
    ++stats_.resends;
    e.sent_on = conns;
  }
  return Status::Ok();
}

void NetworkServerSet::TendLagging(std::size_t i) {
  Impl& impl = *impl_;
  if (impl.OpenLagging(i) == 0) return;
  impl.Drain(i);
  if (Status st = ResendLagging(i); !st.ok()) {
    impl.FailLagging(i, st);
    return;
  }
  Status decode_error;
  bool heard = false;
  DrainReplies(
      impl.sockets[i],
      [&](wire::Message& m, std::size_t size) {
        heard = true;
        if (!impl.AcceptLagged(i, m)) return false;
        stats_.bytes_received += size;
        return true;
      },
      &decode_error);
  if (heard) impl.liveness->Heard(i);
  const Impl::LagEntry* first = impl.FirstOpenLagging(i);
  if (first == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - first->due_from >= impl.liveness->SuspectAfter()) impl.liveness->Check(i);
  if (auto down = impl.DownNow(i); down && down->last_failed_check >= first->due_from) {
    impl.FailLagging(i, impl.DownStatusOf(i, *down));
  } else if (now - first->due_from >= first->deadline) {
    std::string who = impl.endpoints[i];
    if (!decode_error.ok()) who += " (" + decode_error.ToString() + ")";
    impl.FailLagging(i, SilenceStatus(who, first->deadline, first->expected_reply));
  }
}

std::vector<ServerSet::Lagged> NetworkServerSet::TakeLagged() {
  std::vector<Lagged> out;
  for (std::size_t i = 0; i < impl_->lagging.size(); ++i) {
    TendLagging(i);
    auto& entries = impl_->lagging[i];
    for (auto it = entries.begin(); it != entries.end();) {
      if (!it->end) {
        ++it;
        continue;
      }
      out.push_back(Lagged{i, it->seq, it->expected_reply, std::move(*it->end)});
      it = entries.erase(it);
    }
  }
  return out;
}

Result<wire::Message> NetworkServerSet::AwaitLagged(std::size_t server, std::uint64_t seq) {
  if (server >= impl_->lagging.size()) return ServerSet::AwaitLagged(server, seq);
  auto& entries = impl_->lagging[server];
  auto find = [&] {
    return std::find_if(entries.begin(), entries.end(),
                        [seq](const Impl::LagEntry& e) { return e.seq == seq; });
  };
  if (find() == entries.end()) return ServerSet::AwaitLagged(server, seq);
  // Bounded: an open request ends by its deadline or by the server found
  // down (TendLagging).
  for (;;) {
    auto it = find();
    if (it->end) {
      Result<wire::Message> end = std::move(*it->end);
      entries.erase(it);
      return end;
    }
    TendLagging(server);
    if (find()->end) continue;
    zmq_pollitem_t item{impl_->sockets[server], 0, short{ZMQ_POLLIN}, 0};
    if (zmq_poll(&item, 1, 100) < 0 && zmq_errno() != EINTR) {
      impl_->FailLagging(server, Status::IoError(ZmqError("zmq_poll")));
    }
  }
}

std::size_t NetworkServerSet::Lagging(std::size_t i) const {
  return i < impl_->lagging.size() ? impl_->OpenLagging(i) : 0;
}

std::vector<ServerSet::Answers> NetworkServerSet::ExchangeAnswers(
    const std::vector<std::size_t>& servers, const std::vector<RequestView>& requests,
    const TransportOptions& options, Wait wait) {
  return OneExchange(*this, servers, requests, options, wait).Run();
}

}  // namespace s3oram

#include "oramcore/transport.h"

#include <zmq.h>

#include <cerrno>
#include <cstring>
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

}  // namespace

struct ServerSet::Impl {
  void* context = nullptr;
  std::vector<void*> sockets;
  std::vector<std::string> endpoints;

  ~Impl() {
    for (void* s : sockets) zmq_close(s);
    if (context) zmq_ctx_term(context);
  }
};

ServerSet::~ServerSet() = default;

Result<std::unique_ptr<ServerSet>> ServerSet::Connect(const std::vector<std::string>& endpoints) {
  std::unique_ptr<ServerSet> set(new ServerSet());
  set->impl_ = std::make_unique<Impl>();
  Impl& impl = *set->impl_;
  impl.context = zmq_ctx_new();
  if (!impl.context) return Status::IoError(ZmqError("zmq_ctx_new"));
  for (const auto& ep : endpoints) {
    void* s = zmq_socket(impl.context, ZMQ_DEALER);
    if (!s) return Status::IoError(ZmqError("zmq_socket"));
    impl.sockets.push_back(s);
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

Result<std::vector<wire::Message>> ServerSet::ExchangeWith(
    const std::vector<std::size_t>& servers, const std::vector<std::vector<std::uint8_t>>& frames,
    const wire::Header& header, wire::MessageType expected_reply,
    const TransportOptions& options) {
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

  std::vector<wire::Message> replies(n);
  std::vector<bool> done(n, false);
  std::vector<Clock::time_point> sent_at(n);
  std::vector<Status> decode_errors(n);
  const auto start = Clock::now();
  for (std::size_t k = 0; k < n; ++k) {
    S3ORAM_RETURN_IF_ERROR(send(k));
    sent_at[k] = start;
  }

  std::size_t remaining = n;
  std::vector<zmq_pollitem_t> items(n);
  while (remaining > 0) {
    const auto now = Clock::now();
    if (now - start >= options.deadline) {
      std::string who;
      for (std::size_t k = 0; k < n; ++k) {
        if (done[k]) continue;
        if (!who.empty()) who += ", ";
        who += impl_->endpoints[servers[k]];
        if (!decode_errors[k].ok()) who += " (" + decode_errors[k].ToString() + ")";
      }
      return Status::Unavailable(std::string("no ") + wire::MessageTypeName(expected_reply) +
                                 " from " + who + " within " +
                                 std::to_string(options.deadline.count()) + " ms");
    }
    // Resend to servers that have been silent for resend_after.
    auto next_wake = start + options.deadline;
    for (std::size_t k = 0; k < n; ++k) {
      if (done[k]) continue;
      if (now - sent_at[k] >= options.resend_after) {
        S3ORAM_RETURN_IF_ERROR(send(k));
        sent_at[k] = now;
        ++stats_.resends;
      }
      next_wake = std::min(next_wake, sent_at[k] + options.resend_after);
    }
    for (std::size_t k = 0; k < n; ++k) {
      items[k] = zmq_pollitem_t{impl_->sockets[servers[k]], 0, done[k] ? short{0} : short{ZMQ_POLLIN}, 0};
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_wake - Clock::now());
    long timeout_ms = std::max<long>(1, static_cast<long>(wait.count()));
    int rc = zmq_poll(items.data(), static_cast<int>(n), timeout_ms);
    if (rc < 0) {
      if (zmq_errno() == EINTR) continue;
      return Status::IoError(ZmqError("zmq_poll"));
    }
    for (std::size_t k = 0; k < n; ++k) {
      if (done[k] || !(items[k].revents & ZMQ_POLLIN)) continue;
      if (DrainReplies(impl_->sockets[servers[k]], header, expected_reply, &replies[k],
                       &stats_.bytes_received, &decode_errors[k])) {
        done[k] = true;
        --remaining;
      }
    }
  }

  for (std::size_t k = 0; k < n; ++k) {
    if (auto* err = std::get_if<wire::ErrorReply>(&replies[k].body)) {
      return wire::StatusFromError(*err).WithContext("server " + std::to_string(servers[k]) +
                                                     " (" + impl_->endpoints[servers[k]] + ")");
    }
  }
  return replies;
}

}  // namespace s3oram

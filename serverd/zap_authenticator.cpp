#include "serverd/zap_authenticator.h"

#include <spdlog/spdlog.h>
#include <zmq.h>

#include <array>
#include <string>
#include <vector>

namespace s3oram::serverd {
namespace {

// Receives one multipart message (empty on error).
std::vector<std::string> RecvAll(void* s) {
  std::vector<std::string> parts;
  for (;;) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, s, 0) < 0) {
      zmq_msg_close(&m);
      return {};
    }
    parts.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
    const bool more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    if (!more) return parts;
  }
}

void Reply(void* s, const std::string& request_id, const char* code, const std::string& text,
           const std::string& user) {
  const std::string frames[] = {"1.0", request_id, code, text, user, ""};
  for (std::size_t i = 0; i < 6; ++i) {
    zmq_send(s, frames[i].data(), frames[i].size(), i + 1 < 6 ? ZMQ_SNDMORE : 0);
  }
}

}  // namespace

ZapAuthenticator::~ZapAuthenticator() { Stop(); }

Status ZapAuthenticator::Start(void* context, Policy policy) {
  policy_ = std::move(policy);
  socket_ = zmq_socket(context, ZMQ_REP);
  if (socket_ == nullptr) return Status::IoError("creating the ZAP socket");
  int zero = 0;
  zmq_setsockopt(socket_, ZMQ_LINGER, &zero, sizeof zero);
  if (zmq_bind(socket_, "inproc://zeromq.zap.01") != 0) {
    zmq_close(socket_);
    socket_ = nullptr;
    return Status::IoError(std::string("binding the ZAP handler: ") + zmq_strerror(zmq_errno()));
  }
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void ZapAuthenticator::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (socket_ != nullptr) zmq_close(socket_);
  socket_ = nullptr;
}

void ZapAuthenticator::Run() {
  while (!stop_) {
    zmq_pollitem_t item{socket_, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, 100) <= 0) continue;
    // Request: version, request id, domain, address, identity, mechanism,
    // credentials... (RFC 27).
    std::vector<std::string> req = RecvAll(socket_);
    if (req.empty()) continue;
    const std::string request_id = req.size() > 1 ? req[1] : "";
    if (req.size() < 6 || req[0] != "1.0") {
      Reply(socket_, request_id, "500", "malformed ZAP request", "");
      continue;
    }
    const std::string& domain = req[2];
    const std::string& address = req[3];
    const std::string& mechanism = req[5];
    if (mechanism != "CURVE" || req.size() < 7 || req[6].size() != 32) {
      spdlog::warn("refused a {} connection from {}: mechanism {} (only CURVE is accepted)",
                   domain.empty() ? "(no domain)" : domain, address, mechanism);
      Reply(socket_, request_id, "400", "CURVE required", "");
      continue;
    }
    std::array<char, 41> z85{};
    zmq_z85_encode(z85.data(), reinterpret_cast<const std::uint8_t*>(req[6].data()), 32);
    const std::string key(z85.data(), 40);
    auto it = policy_.find(domain);
    if (it == policy_.end() || it->second.count(key) == 0) {
      // Logged the first time per key and then every 100th time, so that
      // someone reconnecting in a loop cannot fill the disk with log lines.
      const std::uint64_t times = ++refusals_[key];
      if (refusals_.size() > 10000) refusals_.clear();
      if (times == 1 || times % 100 == 0) {
        spdlog::warn(
            "refused a {} connection from {}: CURVE key {} is not authorized (add it to {}){}",
            domain.empty() ? "(no domain)" : domain, address, key,
            domain == "peers" ? "the peer's public_key" : "authorized_clients",
            times > 1 ? " [" + std::to_string(times) + " times]" : std::string());
      }
      Reply(socket_, request_id, "400", "key not authorized", "");
      continue;
    }
    spdlog::debug("accepted a {} connection from {} with key {}", domain, address, key);
    Reply(socket_, request_id, "200", "OK", key);
  }
}

}  // namespace s3oram::serverd

#include "oramcore/wire/liveness_monitor.h"

#include <spdlog/spdlog.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "oramcore/wire/wire.h"

namespace s3oram {

namespace {

// What a check's socket may make this process buffer: a STATUS reply is a
// few hundred bytes; a handful of checks queued for a dead server at most.
constexpr std::int64_t kMaxCheckReplyBytes = 1 << 20;
constexpr int kCheckQueue = 4;
// How often the thread looks for new checks while some are in flight.
constexpr std::chrono::milliseconds kPollStep{50};

std::string Seconds(std::chrono::duration<double> d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", d.count());
  return text;
}

}  // namespace

std::string DescribeDown(const ServerDown& down) {
  const std::time_t t = std::chrono::system_clock::to_time_t(down.since);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char at[32];
  std::strftime(at, sizeof at, "%H:%M:%S UTC", &tm);
  return std::string("since ") + at + ": " + down.reason;
}

LivenessMonitor::LivenessMonitor(void* context, std::vector<Target> targets,
                                 std::string client_public_key, Secret client_secret, bool log)
    : context_(context),
      targets_(std::move(targets)),
      client_public_(std::move(client_public_key)),
      log_(log),
      client_secret_(std::move(client_secret)),
      servers_(targets_.size()) {}

LivenessMonitor::~LivenessMonitor() {
  {
    const std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LivenessMonitor::Check(std::size_t i) {
  const std::lock_guard lock(mu_);
  if (stop_ || i >= servers_.size()) return;
  PerServer& s = servers_[i];
  if (s.wanted || s.in_flight) return;
  const auto now = Clock::now();
  if (!s.down && s.last_answer != Clock::time_point{} && now - s.last_answer < kFreshFor) return;
  s.wanted = true;
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  wake_.notify_all();
}

void LivenessMonitor::Heard(std::size_t i) {
  const std::lock_guard lock(mu_);
  if (i >= servers_.size()) return;
  PerServer& s = servers_[i];
  s.last_answer = Clock::now();
  s.in_flight = false;  // a late STATUS reply is taken as any other (TakeAnswers)
  s.wanted = false;
  if (s.down && log_) {
    spdlog::info("server {} ({}) answers again, after {} down", i, targets_[i].endpoint,
                 Seconds(std::chrono::system_clock::now() - s.down->since));
  }
  s.down.reset();
}

// The verdict as reported: its reason with the server's current doubt, which
// may be noted after the verdict (and its count of failures grows).
ServerDown LivenessMonitor::WithDoubt(const PerServer& s, ServerDown down) {
  if (!s.doubt.empty()) down.reason += " (" + s.doubt + ")";
  return down;
}

void LivenessMonitor::NoteDoubt(std::size_t i, std::string doubt) {
  const std::lock_guard lock(mu_);
  if (i < servers_.size()) servers_[i].doubt = std::move(doubt);
}

std::optional<ServerDown> LivenessMonitor::Down(std::size_t i) const {
  const std::lock_guard lock(mu_);
  if (i >= servers_.size() || !servers_[i].down) return std::nullopt;
  return WithDoubt(servers_[i], *servers_[i].down);
}

void LivenessMonitor::SetRoundTrip(std::chrono::duration<double> round_trip) {
  const std::lock_guard lock(mu_);
  round_trip_ = round_trip;
}

std::chrono::milliseconds LivenessMonitor::SuspectAfter() const {
  const std::lock_guard lock(mu_);
  return std::max(kMinSuspectAfter,
                  std::chrono::duration_cast<std::chrono::milliseconds>(4 * round_trip_));
}

std::chrono::milliseconds LivenessMonitor::CheckDeadline() const {
  const std::lock_guard lock(mu_);
  return CheckDeadlineLocked();
}

std::chrono::milliseconds LivenessMonitor::CheckDeadlineLocked() const {
  return std::clamp(
      kMinCheckDeadline + std::chrono::duration_cast<std::chrono::milliseconds>(4 * round_trip_),
      kMinCheckDeadline, kMaxCheckDeadline);
}

bool LivenessMonitor::OpenSockets(std::vector<void*>& sockets) {
  for (const Target& t : targets_) {
    void* s = zmq_socket(context_, ZMQ_DEALER);
    if (!s) return false;
    sockets.push_back(s);
    const int linger = 0, send_hwm = kCheckQueue, receive_hwm = kCheckQueue;
    const int reconnect_ivl = 100, reconnect_max = 500;
    if (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, t.server_key.c_str(), t.server_key.size() + 1) !=
            0 ||
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, client_public_.c_str(), client_public_.size() + 1) !=
            0 ||
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, client_secret_.data(), client_secret_.size()) != 0 ||
        zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_setsockopt(s, ZMQ_SNDHWM, &send_hwm, sizeof send_hwm) != 0 ||
        zmq_setsockopt(s, ZMQ_RCVHWM, &receive_hwm, sizeof receive_hwm) != 0 ||
        zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &kMaxCheckReplyBytes, sizeof kMaxCheckReplyBytes) != 0 ||
        zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &reconnect_ivl, sizeof reconnect_ivl) != 0 ||
        zmq_setsockopt(s, ZMQ_RECONNECT_IVL_MAX, &reconnect_max, sizeof reconnect_max) != 0 ||
        zmq_connect(s, t.endpoint.c_str()) != 0) {
      return false;
    }
  }
  return true;
}

void LivenessMonitor::SendCheck(std::size_t i, void* socket, Clock::time_point now) {
  PerServer& s = servers_[i];
  wire::Header h;
  h.seq = ++seq_;
  const auto frame = wire::Encode(h, wire::Body{wire::StatusRequest{}});
  // Never blocks; a full queue (a dead server's checks pile up until it
  // returns) counts as sent: the deadline covers it.
  (void)zmq_send(socket, frame.data(), frame.size(), ZMQ_DONTWAIT);
  s.wanted = false;
  s.in_flight = true;
  s.sent = now;
}

void LivenessMonitor::TakeAnswers(std::size_t i, void* socket, Clock::time_point now) {
  bool answered = false;
  for (;;) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      break;
    }
    const auto type = wire::PeekType(std::span<const std::uint8_t>(
        static_cast<const std::uint8_t*>(zmq_msg_data(&msg)), zmq_msg_size(&msg)));
    zmq_msg_close(&msg);
    // Any answer, to this check or an earlier one: the server is there now.
    answered =
        answered ||
        (type && (*type == wire::MessageType::kStatusReply || *type == wire::MessageType::kError));
  }
  if (!answered) return;
  PerServer& s = servers_[i];
  s.in_flight = false;
  s.last_answer = now;
  if (s.down && log_) {
    spdlog::info("server {} ({}) answers again, after {} down", i, targets_[i].endpoint,
                 Seconds(std::chrono::system_clock::now() - s.down->since));
  }
  s.down.reset();
}

void LivenessMonitor::ExpireChecks(Clock::time_point now) {
  const auto deadline = CheckDeadlineLocked();
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    PerServer& s = servers_[i];
    if (!s.in_flight || now - s.sent < deadline) continue;
    s.in_flight = false;
    if (s.down) {
      s.down->last_failed_check = s.sent;
      continue;
    }
    ServerDown d;
    d.since = std::chrono::system_clock::now();
    d.reason = "it did not answer a liveness check (STATUS) within " + Seconds(deadline);
    d.last_failed_check = s.sent;
    if (log_) {
      spdlog::warn(
          "server {} ({}) is down, {}: requests that need it fail at once until it answers "
          "again (checked every {})",
          i, targets_[i].endpoint, DescribeDown(WithDoubt(s, d)), Seconds(kRecheckEvery));
    }
    s.down = std::move(d);
  }
}

void LivenessMonitor::Run() {
  std::vector<void*> sockets;
  const bool opened = OpenSockets(sockets);
  std::unique_lock lock(mu_);
  client_secret_ = Secret();  // the sockets hold their own copy
  if (!opened) {
    spdlog::error("liveness checks are off: opening their sockets failed: {}",
                  zmq_strerror(zmq_errno()));
    for (PerServer& s : servers_) s.wanted = false;
    while (!stop_) wake_.wait(lock);
  }
  while (!stop_) {
    auto now = Clock::now();
    bool in_flight = false, down = false;
    auto next_recheck = Clock::time_point::max();
    for (std::size_t i = 0; opened && i < servers_.size(); ++i) {
      PerServer& s = servers_[i];
      if (!s.in_flight && (s.wanted || (s.down && now - s.sent >= kRecheckEvery))) {
        SendCheck(i, sockets[i], now);
      }
      in_flight = in_flight || s.in_flight;
      if (s.down) {
        down = true;
        next_recheck = std::min(next_recheck, s.sent + kRecheckEvery);
      }
    }
    if (in_flight) {
      std::vector<zmq_pollitem_t> items;
      for (void* s : sockets) items.push_back(zmq_pollitem_t{s, 0, short{ZMQ_POLLIN}, 0});
      lock.unlock();
      const int rc = zmq_poll(items.data(), static_cast<int>(items.size()),
                              static_cast<long>(kPollStep.count()));
      lock.lock();
      now = Clock::now();
      for (std::size_t i = 0; rc > 0 && i < items.size(); ++i) {
        if (items[i].revents & ZMQ_POLLIN) TakeAnswers(i, sockets[i], now);
      }
      ExpireChecks(now);
    } else if (down) {
      wake_.wait_until(lock, next_recheck);
    } else {
      wake_.wait(lock, [this] {
        return stop_ || std::any_of(servers_.begin(), servers_.end(),
                                    [](const auto& s) { return s.wanted; });
      });
    }
  }
  lock.unlock();
  for (void* s : sockets) zmq_close(s);
}

}  // namespace s3oram

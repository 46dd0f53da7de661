#include "bench/netem/delay_relay.h"

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <charconv>
#include <deque>
#include <functional>
#include <system_error>

namespace s3oram::netem {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

bool ParseHostPort(const std::string& text, std::string* host, std::uint16_t* port) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  boost::system::error_code ec;
  asio::ip::make_address_v4(text.substr(0, colon), ec);
  if (ec) return false;
  unsigned value = 0;
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  auto [ptr, err] = std::from_chars(first, last, value);
  if (err != std::errc() || ptr != last || first == last || value > 65535) return false;
  *host = text.substr(0, colon);
  *port = static_cast<std::uint16_t>(value);
  return true;
}

struct SharedCounters {
  std::atomic<std::uint64_t> connections{0};
  std::atomic<std::uint64_t> bytes{0};
};

// One direction of one connection: reads from `from`, holds each chunk until
// its due time, writes it to `to`. Invariant: chunks leave in the order they
// arrived, and buffered_ (bytes read, not yet written) stays at most
// max_buffered_ + one read's worth.
class Pump : public std::enable_shared_from_this<Pump> {
 public:
  // owner keeps the sockets alive while this pump has work pending; on_done
  // is called once: with false after the end of stream was passed on, with
  // true after a write failed.
  Pump(std::shared_ptr<void> owner, tcp::socket& from, tcp::socket& to,
       std::chrono::microseconds delay, std::size_t max_buffered, SharedCounters& counters,
       std::function<void(bool failed)> on_done)
      : owner_(std::move(owner)),
        from_(from),
        to_(to),
        timer_(from.get_executor()),
        delay_(delay),
        max_buffered_(max_buffered),
        counters_(counters),
        on_done_(std::move(on_done)) {}

  void Start() { Read(); }
  void Cancel() {
    timer_.cancel();
    finished_ = true;
  }

 private:
  struct Chunk {
    Clock::time_point due;
    std::vector<char> bytes;  // empty: end of stream
  };
  static constexpr std::size_t kReadSize = 64 * 1024;

  void Read() {
    reading_ = true;
    auto buf = std::make_shared<std::vector<char>>(kReadSize);
    from_.async_read_some(
        asio::buffer(*buf),
        [self = shared_from_this(), buf](const boost::system::error_code& ec, std::size_t n) {
          self->reading_ = false;
          if (self->finished_) return;
          if (ec) {
            // EOF or reset: pass the end on after what is queued.
            self->queue_.push_back(Chunk{Clock::now() + self->delay_, {}});
            self->eof_queued_ = true;
          } else {
            buf->resize(n);
            self->buffered_ += n;
            self->queue_.push_back(Chunk{Clock::now() + self->delay_, std::move(*buf)});
          }
          self->WriteNext();
          if (!self->eof_queued_ && self->buffered_ < self->max_buffered_) self->Read();
        });
  }

  void WriteNext() {
    if (writing_ || queue_.empty() || finished_) return;
    writing_ = true;
    const auto due = queue_.front().due;
    if (due > Clock::now()) {
      timer_.expires_at(due);
      timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (ec || self->finished_) return;
        self->WriteFront();
      });
    } else {
      WriteFront();
    }
  }

  void WriteFront() {
    Chunk& chunk = queue_.front();
    if (chunk.bytes.empty()) {
      boost::system::error_code ignored;
      to_.shutdown(tcp::socket::shutdown_send, ignored);
      finished_ = true;
      on_done_(false);
      return;
    }
    asio::async_write(
        to_, asio::buffer(chunk.bytes),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          if (self->finished_) return;
          if (ec) {
            self->finished_ = true;
            self->on_done_(true);
            return;
          }
          self->counters_.bytes += n;
          self->buffered_ -= n;
          self->queue_.pop_front();
          self->writing_ = false;
          if (!self->reading_ && !self->eof_queued_ && self->buffered_ < self->max_buffered_)
            self->Read();
          self->WriteNext();
        });
  }

  std::shared_ptr<void> owner_;
  tcp::socket& from_;
  tcp::socket& to_;
  asio::steady_timer timer_;
  const std::chrono::microseconds delay_;
  const std::size_t max_buffered_;
  SharedCounters& counters_;
  std::function<void(bool)> on_done_;
  std::deque<Chunk> queue_;
  std::size_t buffered_ = 0;
  bool reading_ = false;
  bool writing_ = false;
  bool eof_queued_ = false;
  bool finished_ = false;
};

// An accepted client socket and its upstream socket. The pumps own it (through
// their owner pointer) while they have work pending; CloseBoth drops its own
// references to them, which breaks the cycle, so it is freed after the last
// handler of either pump has run. Both directions ending, or one failing,
// closes both sockets.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket client, std::chrono::microseconds delay, std::size_t max_buffered,
             SharedCounters& counters)
      : client_(std::move(client)),
        upstream_(client_.get_executor()),
        delay_(delay),
        max_buffered_(max_buffered),
        counters_(counters) {}

  void Start(const tcp::endpoint& upstream) {
    upstream_.async_connect(
        upstream, [self = shared_from_this()](const boost::system::error_code& ec) {
          if (ec) {
            self->CloseBoth();  // the client sees its connection end, as with a refused connect
            return;
          }
          boost::system::error_code ignored;
          self->client_.set_option(tcp::no_delay(true), ignored);
          self->upstream_.set_option(tcp::no_delay(true), ignored);
          self->counters_.connections++;
          auto done = [weak = std::weak_ptr<Connection>(self)](bool failed) {
            if (auto c = weak.lock()) c->OneDirectionDone(failed);
          };
          self->up_ = std::make_shared<Pump>(self, self->client_, self->upstream_, self->delay_,
                                             self->max_buffered_, self->counters_, done);
          self->down_ = std::make_shared<Pump>(self, self->upstream_, self->client_, self->delay_,
                                               self->max_buffered_, self->counters_, done);
          self->up_->Start();
          self->down_->Start();
        });
  }

  void CloseBoth() {
    if (up_) up_->Cancel();
    if (down_) down_->Cancel();
    up_.reset();
    down_.reset();
    boost::system::error_code ignored;
    client_.close(ignored);
    upstream_.close(ignored);
  }

 private:
  void OneDirectionDone(bool failed) {
    if (failed || ++directions_done_ == 2) CloseBoth();
  }

  tcp::socket client_;
  tcp::socket upstream_;
  const std::chrono::microseconds delay_;
  const std::size_t max_buffered_;
  SharedCounters& counters_;
  std::shared_ptr<Pump> up_;
  std::shared_ptr<Pump> down_;
  int directions_done_ = 0;
};

}  // namespace

bool ParseForward(const std::string& text, Forward* out, std::string* error) {
  const auto eq = text.find('=');
  Forward f;
  if (eq == std::string::npos ||
      !ParseHostPort(text.substr(0, eq), &f.listen_host, &f.listen_port) ||
      !ParseHostPort(text.substr(eq + 1), &f.upstream_host, &f.upstream_port) ||
      f.upstream_port == 0) {
    *error =
        "forward '" + text + "': expected LISTEN_IPV4:PORT=UPSTREAM_IPV4:PORT (upstream port > 0)";
    return false;
  }
  *out = f;
  return true;
}

struct DelayRelay::Impl {
  asio::io_context io;
  std::vector<Forward> forwards;
  std::vector<tcp::acceptor> acceptors;
  std::vector<tcp::endpoint> upstreams;
  std::vector<std::weak_ptr<Connection>> connections;
  std::chrono::microseconds delay;
  std::size_t max_buffered;
  SharedCounters counters;
  asio::steady_timer lifetime_timer{io};

  void Accept(std::size_t i) {
    acceptors[i].async_accept([this, i](const boost::system::error_code& ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) {
        auto conn = std::make_shared<Connection>(std::move(socket), delay, max_buffered, counters);
        std::erase_if(connections, [](const auto& w) { return w.expired(); });
        connections.push_back(conn);
        conn->Start(upstreams[i]);
      }
      Accept(i);
    });
  }

  void Shutdown() {
    boost::system::error_code ignored;
    for (auto& a : acceptors) a.close(ignored);
    for (auto& w : connections) {
      if (auto c = w.lock()) c->CloseBoth();
    }
    lifetime_timer.cancel();
  }
};

DelayRelay::DelayRelay(std::vector<Forward> forwards, std::chrono::microseconds delay,
                       std::size_t max_buffered)
    : impl_(std::make_unique<Impl>()) {
  impl_->forwards = std::move(forwards);
  impl_->delay = delay;
  impl_->max_buffered = max_buffered;
  for (const auto& f : impl_->forwards) {
    const tcp::endpoint listen(asio::ip::make_address_v4(f.listen_host), f.listen_port);
    tcp::acceptor acceptor(impl_->io);
    boost::system::error_code ec;
    acceptor.open(listen.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(listen, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      throw std::system_error(ec.value(), std::generic_category(),
                              "listen on " + f.listen_host + ":" + std::to_string(f.listen_port));
    }
    impl_->acceptors.push_back(std::move(acceptor));
    impl_->upstreams.emplace_back(asio::ip::make_address_v4(f.upstream_host), f.upstream_port);
  }
}

DelayRelay::~DelayRelay() = default;

std::vector<std::uint16_t> DelayRelay::bound_ports() const {
  std::vector<std::uint16_t> ports;
  for (const auto& a : impl_->acceptors) ports.push_back(a.local_endpoint().port());
  return ports;
}

void DelayRelay::Run(std::chrono::seconds lifetime) {
  for (std::size_t i = 0; i < impl_->acceptors.size(); ++i) impl_->Accept(i);
  if (lifetime.count() > 0) {
    impl_->lifetime_timer.expires_after(lifetime);
    impl_->lifetime_timer.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) impl_->Shutdown();
    });
  }
  impl_->io.run();
}

void DelayRelay::Stop() {
  asio::post(impl_->io, [this] { impl_->Shutdown(); });
}

RelayCounters DelayRelay::counters() const {
  return RelayCounters{impl_->counters.connections.load(), impl_->counters.bytes.load()};
}

}  // namespace s3oram::netem

#include "tests/support/in_process_cluster.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "oramcore/crypto/curve_keys.h"
#include "oramcore/math/field.h"
#include "serverd/config.h"
#include "serverd/peer_exchange.h"
#include "serverd/rebuild_terms_inbox.h"
#include "serverd/request_handler.h"
#include "serverd/share_store.h"
#include "serverd/smp_inbox.h"

namespace s3oram::testing {

namespace {

using field::Elem;
using Clock = std::chrono::steady_clock;

std::string EndpointOf(std::size_t i) { return "in-process://server" + std::to_string(i); }

}  // namespace

// The SMP shares in flight between the servers: one inbox per server, and
// which servers are cut off. One lock for all; waiters are woken on every
// delivery and every change of who is down or superseded.
struct InProcessCluster::Hub {
 public:
  explicit Hub(std::size_t servers)
      : inboxes_(servers), term_inboxes_(servers), down_(servers, false), superseding_(servers) {}

  std::mutex mu;
  std::condition_variable changed;

  serverd::SmpInbox& inbox(std::size_t i) { return inboxes_[i]; }
  serverd::RebuildTermsInbox& terms(std::size_t i) { return term_inboxes_[i]; }
  // Sees every REBUILD_TERMS delivered (under mu), for the tests of what
  // the rebuild target receives.
  TermsObserver terms_observer;
  bool down(std::size_t i) const { return down_[i]; }
  void SetDown(std::size_t i, bool down) {
    {
      const std::lock_guard lock(mu);
      down_[i] = down;
    }
    changed.notify_all();
  }
  // A newer attempt of an eviction reached server i while it computes an
  // older one: the older one stops at its next wait (as in serverd::Server).
  void Supersede(std::size_t i, std::pair<std::uint64_t, std::uint32_t> attempt) {
    {
      const std::lock_guard lock(mu);
      if (!superseding_[i] || *superseding_[i] < attempt) superseding_[i] = attempt;
    }
    changed.notify_all();
  }
  const std::optional<std::pair<std::uint64_t, std::uint32_t>>& superseding(std::size_t i) const {
    return superseding_[i];
  }

 private:
  std::vector<serverd::SmpInbox> inboxes_;
  std::vector<serverd::RebuildTermsInbox> term_inboxes_;
  std::vector<bool> down_;
  std::vector<std::optional<std::pair<std::uint64_t, std::uint32_t>>> superseding_;
};

namespace {

using PeerHub = InProcessCluster::Hub;

// Server `me`'s side of the SMP rounds, through the hub.
class InProcessPeers final : public serverd::PeerExchange {
 public:
  InProcessPeers(PeerHub& hub, std::uint32_t me, std::size_t parties,
                 std::chrono::milliseconds timeout)
      : hub_(hub), me_(me), parties_(parties), timeout_(timeout) {}

  Status Send(const std::vector<std::vector<std::uint8_t>>& frames) override {
    if (frames.size() != parties_) {
      return Status::InvalidArgument("in-process peers: " + std::to_string(frames.size()) +
                                     " frames for " + std::to_string(parties_) + " parties");
    }
    {
      const std::lock_guard lock(hub_.mu);
      if (hub_.down(me_)) return Status::Ok();  // sent into a cut link
      for (std::size_t p = 0; p < parties_; ++p) {
        if (p == me_ || frames[p].empty()) continue;  // empty: not a participant
        bytes_sent_ += frames[p].size();
        if (hub_.down(p)) continue;
        wire::Header h;
        wire::SmpShares m;
        S3ORAM_RETURN_IF_ERROR(wire::DecodeSmpSharesInto(frames[p], &h, &m));
        hub_.inbox(p).Put(serverd::SmpInbox::Key{m.eviction, m.attempt, m.round, me_},
                          std::move(m.shares), /*applied=*/0);
      }
    }
    hub_.changed.notify_all();
    return Status::Ok();
  }

  Result<std::vector<std::span<const Elem>>> Await(const serverd::SmpRound& r) override {
    std::unique_lock lock(hub_.mu);
    serverd::SmpInbox& inbox = hub_.inbox(me_);
    auto key = [&](std::size_t p) {
      return serverd::SmpInbox::Key{r.eviction, r.attempt, r.round, static_cast<std::uint32_t>(p)};
    };
    auto awaited = [&](std::size_t p) { return p != me_ && ((r.from >> p) & 1u) != 0; };
    auto have_all = [&] {
      for (std::size_t p = 0; p < parties_; ++p) {
        if (awaited(p) && !inbox.Has(key(p))) return false;
      }
      return true;
    };
    auto superseded = [&] {
      const auto& s = hub_.superseding(me_);
      return s && s->first == r.eviction && s->second > r.attempt;
    };
    const auto deadline = Clock::now() + timeout_;
    while (!have_all()) {
      if (superseded()) {
        return Status::Unavailable("eviction " + std::to_string(r.eviction) + " attempt " +
                                   std::to_string(r.attempt) + " superseded by the client");
      }
      if (hub_.changed.wait_until(lock, deadline) == std::cv_status::timeout && !have_all()) {
        std::string missing;
        for (std::size_t p = 0; p < parties_; ++p) {
          if (awaited(p) && !inbox.Has(key(p))) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(p);
          }
        }
        return Status::Unavailable("eviction " + std::to_string(r.eviction) + " attempt " +
                                   std::to_string(r.attempt) + " round " + std::to_string(r.round) +
                                   ": no SMP shares from peer(s) " + missing + " within " +
                                   std::to_string(timeout_.count()) + " ms");
      }
    }
    std::vector<std::span<const Elem>> out;
    for (std::size_t p = 0; p < parties_; ++p) {
      if (awaited(p)) out.emplace_back(inbox.At(key(p)));
    }
    return out;
  }

  void Release(const serverd::SmpRound& r) override {
    const std::lock_guard lock(hub_.mu);
    for (std::size_t p = 0; p < parties_; ++p) {
      if (p == me_) continue;
      hub_.inbox(me_).Release(
          serverd::SmpInbox::Key{r.eviction, r.attempt, r.round, static_cast<std::uint32_t>(p)});
    }
  }

  void Reset() override {
    const std::lock_guard lock(hub_.mu);
    hub_.inbox(me_).Clear();
    hub_.terms(me_).Clear();
  }

  Status SendTerms(std::uint32_t target, std::span<const std::uint8_t> frame) override {
    if (target >= parties_ || target == me_) {
      return Status::InvalidArgument("in-process peers: no peer " + std::to_string(target));
    }
    {
      const std::lock_guard lock(hub_.mu);
      if (hub_.down(me_) || hub_.down(target)) return Status::Ok();  // sent into a cut link
      auto msg = wire::Decode(frame);
      S3ORAM_RETURN_IF_ERROR(msg.status());
      auto& terms = std::get<wire::RebuildTerms>(msg->body);
      if (terms.from_index != me_) {
        return Status::InvalidArgument("in-process peers: terms claim another sender");
      }
      bytes_sent_ += frame.size();
      if (hub_.terms_observer) hub_.terms_observer(target, terms);
      hub_.terms(target).Put(std::move(terms));
    }
    hub_.changed.notify_all();
    return Status::Ok();
  }

  Result<std::vector<std::vector<Elem>>> AwaitTerms(const serverd::TermsWanted& w) override {
    std::unique_lock lock(hub_.mu);
    serverd::RebuildTermsInbox& inbox = hub_.terms(me_);
    auto key = [&](std::uint32_t p) {
      return serverd::RebuildTermsInbox::Key{w.nonce, w.first_bucket, p};
    };
    auto have_all = [&] {
      return std::all_of(w.from.begin(), w.from.end(),
                         [&](std::uint32_t p) { return inbox.Has(key(p), w.holes); });
    };
    if (!hub_.changed.wait_for(lock, timeout_, have_all)) {
      return Status::Unavailable(
          "rebuild: no terms of buckets from " + std::to_string(w.first_bucket) +
          " from every participant within " + std::to_string(timeout_.count()) + " ms");
    }
    std::vector<std::vector<Elem>> out;
    for (std::uint32_t p : w.from) out.push_back(*inbox.Take(key(p), w.holes));
    return out;
  }

  std::uint64_t bytes_sent() const override { return bytes_sent_; }

 private:
  PeerHub& hub_;
  const std::uint32_t me_;
  const std::size_t parties_;
  const std::chrono::milliseconds timeout_;
  std::atomic<std::uint64_t> bytes_sent_{0};
};

}  // namespace

struct InProcessCluster::Server {
  std::size_t index = 0;
  serverd::ServerConfig config;
  PeerHub* hub = nullptr;
  std::unique_ptr<InProcessPeers> peers;

  std::mutex mu;  // one request at a time; guards everything below
  std::unique_ptr<serverd::RequestHandler> handler;
  std::thread prepare;  // RequestHandler::RunPrepare of the last EVICT_PREPARE
  std::atomic<bool> prepare_done{true};
  Liar liar;
  std::chrono::milliseconds delay{0};
  bool lagging = false;
  std::uint64_t handled = 0;

  ~Server() { JoinPrepare(); }

  void JoinPrepare() {
    if (prepare.joinable()) prepare.join();
  }

  // As a crash between two requests: the computation under way ends first
  // (the peers' shares it waits for, or its timeout), then the handler and
  // every SMP share buffered for it. Start() opens the directory again.
  void Stop() {
    JoinPrepare();
    handler.reset();
    peers->Reset();
  }

  Status Start() {
    auto h = serverd::RequestHandler::Create(config, *peers);
    if (!h.ok())
      return h.status().WithContext("starting in-process server " + std::to_string(index));
    handler = std::move(h).value();
    return Status::Ok();
  }

  // As serverd::Server serves one client frame: during an eviction's
  // computation, the frames the handler admits beside it are answered at
  // once and any other waits for the computation to end.
  std::vector<std::uint8_t> Serve(std::span<const std::uint8_t> frame) {
    std::chrono::milliseconds wait;
    {
      const std::lock_guard lock(mu);
      wait = delay;
    }
    if (wait.count() > 0) std::this_thread::sleep_for(wait);
    const std::lock_guard lock(mu);
    ++handled;
    if (prepare.joinable()) {
      if (!prepare_done.load()) {
        if (const auto attempt = serverd::RequestHandler::PrepareAttemptOf(frame)) {
          hub->Supersede(index, *attempt);
        }
        if (serverd::RequestHandler::ServedDuringPrepare(frame)) return handler->Handle(frame);
      }
      prepare.join();
    }
    std::vector<std::uint8_t> reply = handler->Handle(frame);
    if (handler->HasPendingPrepare()) {
      prepare_done.store(false);
      prepare = std::thread([this] {
        handler->RunPrepare();
        prepare_done.store(true);
      });
    }
    return reply;
  }
};

// One client's connection: a ServerSet over the cluster's servers.
class InProcessCluster::Connection final : public ServerSet {
 public:
  explicit Connection(InProcessCluster& cluster) : cluster_(cluster) {
    for (std::size_t i = 0; i < cluster.size(); ++i) endpoints_.push_back(EndpointOf(i));
  }

  std::size_t size() const override { return endpoints_.size(); }
  const std::string& endpoint(std::size_t i) const override { return endpoints_.at(i); }
  const TransportStats& stats() const override { return stats_; }
  // A server SetDown made down is found down at once (as a liveness check
  // of the network set finds one).
  std::optional<ServerDown> Down(std::size_t i) const override {
    if (i >= size() || !cluster_.down(i)) return std::nullopt;
    return ServerDown{std::chrono::system_clock::now(), "it is down in this test",
                      std::chrono::steady_clock::now()};
  }

  std::vector<Answers> ExchangeAnswers(const std::vector<std::size_t>& servers,
                                       const std::vector<RequestView>& requests,
                                       const TransportOptions& options, Wait wait) override {
    const std::size_t n = servers.size(), count = requests.size();
    // answer[r][k]: server k's reply to request r, or its failure.
    std::vector<std::vector<std::optional<Result<wire::Message>>>> answer(
        count, std::vector<std::optional<Result<wire::Message>>>(n));
    std::vector<std::optional<Status>> abandoned(count);  // kEvery: r's first failure
    for (std::size_t r = 0; r < count; ++r) {
      if (requests[r].frames->size() != n) {
        abandoned[r] = Status::InvalidArgument("one frame per server expected");
      }
    }
    for (std::size_t k = 0; k < n; ++k) {
      if (servers[k] >= size()) {
        for (auto& f : abandoned)
          f = Status::InvalidArgument("no server " + std::to_string(servers[k]));
      }
    }
    std::vector<bool> invalid(count);
    for (std::size_t r = 0; r < count; ++r) invalid[r] = abandoned[r].has_value();
    std::vector<bool> server_failed(n, false);
    // kQuorum: how many failures a request survives.
    const std::size_t quorum =
        wait == Wait::kQuorum && options.quorum > 0 ? std::min(options.quorum, n) : n;
    std::vector<std::size_t> failures(count, 0);
    // Which servers hold this call's requests instead of answering them
    // (SetLagging; never so many that no request could have its quorum);
    // every other server first answers what it holds, in order.
    std::vector<bool> hold(n, false);
    std::size_t holding = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = servers[k];
      if (i >= size()) continue;
      if (wait == Wait::kQuorum && cluster_.lagging(i) && holding < n - quorum &&
          Held(i).size() + count <= kMaxLagging) {
        hold[k] = true;
        ++holding;
      } else {
        ServeHeld(i, Held(i).size());
      }
    }
    // Request r goes to every server before request r + 1 (an EVICT_PREPARE
    // reaches every server before anything that waits for its computation).
    // A server that failed gets nothing more; the others get every request,
    // as from the network's pipelined sender, which has sent them already:
    // under kEvery a failure on one server leaves the requests after it
    // applied on the others.
    for (std::size_t r = 0; r < count; ++r) {
      if (invalid[r]) continue;
      for (std::size_t k = 0; k < n; ++k) {
        const std::size_t i = servers[k];
        auto fail_from = [&](const Status& st) {
          server_failed[k] = true;
          for (std::size_t q = r; q < count; ++q) {
            if (!answer[q][k]) {
              answer[q][k] = st;
              ++failures[q];
            }
            if (wait == Wait::kEvery && !abandoned[q]) abandoned[q] = st;
            if (wait == Wait::kQuorum && !abandoned[q] && failures[q] > n - quorum) {
              abandoned[q] = st;
            }
          }
        };
        if (server_failed[k]) continue;
        if (hold[k]) {
          Held(i).push_back(HeldRequest{requests[r].header.seq, requests[r].expected_reply,
                                        (*requests[r].frames)[k], options.deadline});
          continue;
        }
        auto reply = ServeOne(i, (*requests[r].frames)[k], requests[r].header.seq,
                              requests[r].expected_reply, options.deadline);
        if (!reply.ok()) {
          fail_from(reply.status());
          continue;
        }
        answer[r][k] = std::move(reply);
      }
    }
    std::vector<Answers> answers(count);
    for (std::size_t r = 0; r < count; ++r) {
      for (std::size_t k = 0; k < n; ++k) {
        if (abandoned[r]) {
          answers[r].push_back(Answer{*abandoned[r], {}});
        } else if (hold[k] && !answer[r][k]) {
          answers[r].push_back(Answer{LaggingStatus(servers[k], endpoints_[servers[k]]), {}, true});
        } else {
          answers[r].push_back(Answer{std::move(*answer[r][k]), {}});
        }
      }
    }
    return answers;
  }

  std::vector<Lagged> TakeLagged() override {
    std::vector<Lagged> out;
    for (std::size_t i = 0; i < size(); ++i) {
      if (!cluster_.lagging(i)) ServeHeld(i, Held(i).size());
      for (Lagged& e : Ended(i)) out.push_back(std::move(e));
      Ended(i).clear();
    }
    return out;
  }

  Result<wire::Message> AwaitLagged(std::size_t server, std::uint64_t seq) override {
    if (server >= size()) return ServerSet::AwaitLagged(server, seq);
    auto& held = Held(server);
    for (std::size_t x = 0; x < held.size(); ++x) {
      if (held[x].seq == seq) {
        ServeHeld(server, x + 1);
        break;
      }
    }
    auto& ended = Ended(server);
    for (auto it = ended.begin(); it != ended.end(); ++it) {
      if (it->seq != seq) continue;
      Result<wire::Message> end = std::move(it->reply);
      ended.erase(it);
      return end;
    }
    return ServerSet::AwaitLagged(server, seq);
  }

  std::size_t Lagging(std::size_t i) const override {
    return i < held_.size() ? held_[i].size() : 0;
  }

 private:
  // Server i's answer to one frame: its reply (the liar's change applied),
  // or its failure as the network reports it.
  Result<wire::Message> ServeOne(std::size_t i, const std::vector<std::uint8_t>& frame,
                                 std::uint64_t seq, wire::MessageType expected,
                                 std::chrono::milliseconds deadline) {
    const std::string who = "server " + std::to_string(i) + " (" + endpoints_[i] + ")";
    Server& server = *cluster_.servers_[i];
    if (cluster_.down(i)) {
      return SilenceStatus(endpoints_[i], deadline, expected, " (in process: set down)");
    }
    stats_.bytes_sent += frame.size();
    const std::vector<std::uint8_t> reply = server.Serve(frame);
    auto decoded = wire::Decode(reply);
    if (!decoded.ok()) return decoded.status().WithContext(who);
    wire::Message m = std::move(decoded).value();
    if (m.header.seq != seq ||
        (m.header.type != expected && m.header.type != wire::MessageType::kError)) {
      return Status::Protocol(who + ": reply " + wire::MessageTypeName(m.header.type) + " seq " +
                              std::to_string(m.header.seq) + " to a request wanting " +
                              wire::MessageTypeName(expected) + " seq " + std::to_string(seq));
    }
    stats_.bytes_received += reply.size();
    Liar liar;
    {
      const std::lock_guard lock(server.mu);
      liar = server.liar;
    }
    if (liar) liar(m);
    return m;
  }

  // A request server i holds (SetLagging), until it is served.
  struct HeldRequest {
    std::uint64_t seq = 0;
    wire::MessageType expected = wire::MessageType::kError;
    std::vector<std::uint8_t> frame;
    std::chrono::milliseconds deadline{0};
  };
  std::deque<HeldRequest>& Held(std::size_t i) {
    if (held_.size() < size()) held_.resize(size());
    return held_[i];
  }
  // The ends of held requests, for TakeLagged and AwaitLagged.
  std::deque<Lagged>& Ended(std::size_t i) {
    if (ended_.size() < size()) ended_.resize(size());
    return ended_[i];
  }
  // Serves the first `count` requests server i holds, in order; after a
  // failure the rest fail with it, as on a connection.
  void ServeHeld(std::size_t i, std::size_t count) {
    auto& held = Held(i);
    std::optional<Status> failed;
    for (std::size_t x = 0; x < count && !held.empty(); ++x) {
      HeldRequest h = std::move(held.front());
      held.pop_front();
      Result<wire::Message> end = failed ? Result<wire::Message>(*failed)
                                         : ServeOne(i, h.frame, h.seq, h.expected, h.deadline);
      if (!end.ok()) failed = end.status();
      Ended(i).push_back(Lagged{i, h.seq, h.expected, std::move(end)});
    }
  }

  InProcessCluster& cluster_;
  std::vector<std::string> endpoints_;
  TransportStats stats_;
  std::vector<std::deque<HeldRequest>> held_;
  std::vector<std::deque<Lagged>> ended_;
};

Result<std::unique_ptr<InProcessCluster>> InProcessCluster::Create(const std::string& dir,
                                                                   const Options& options) {
  if (options.servers < 3) {
    return Status::InvalidArgument("an in-process cluster needs at least 3 servers");
  }
  std::unique_ptr<InProcessCluster> cluster(new InProcessCluster());
  cluster->dir_ = dir;
  cluster->options_ = options;
  cluster->hub_ = std::make_unique<Hub>(options.servers);
  // Each server's CURVE keypair: no link uses it in process, but the
  // rebuild's pairwise masks are derived from the servers' keys.
  std::vector<std::string> public_keys;
  std::error_code made;
  std::filesystem::create_directories(dir, made);
  if (made) return Status::IoError("creating " + dir + ": " + made.message());
  for (std::size_t i = 0; i < options.servers; ++i) {
    S3ORAM_ASSIGN_OR_RETURN(CurveKeypair keys, GenerateCurveKeypair());
    S3ORAM_RETURN_IF_ERROR(WriteCurveKeypair(keys, dir + "/server" + std::to_string(i)));
    public_keys.push_back(keys.public_key);
  }
  cluster->public_keys_ = public_keys;
  for (std::size_t i = 0; i < options.servers; ++i) {
    auto s = std::make_unique<Server>();
    s->index = i;
    s->hub = cluster->hub_.get();
    serverd::ServerConfig& c = s->config;
    c.index = static_cast<std::uint32_t>(i);
    c.listen = EndpointOf(i);
    c.peer_listen = EndpointOf(i) + "/peers";
    c.data_dir = dir + "/server" + std::to_string(i);
    c.threads = 1;
    c.eviction_nice = 0;
    c.sync = options.sync;
    c.peer_timeout_ms = static_cast<std::uint32_t>(options.peer_timeout.count());
    c.secret_key_file = dir + "/server" + std::to_string(i) + ".key";
    for (std::size_t j = 0; j < options.servers; ++j) {
      if (j != i) {
        c.peers.push_back(
            {static_cast<std::uint32_t>(j), EndpointOf(j) + "/peers", public_keys[j]});
      }
    }
    std::error_code ec;
    std::filesystem::create_directories(c.data_dir, ec);
    if (ec) return Status::IoError("creating " + c.data_dir + ": " + ec.message());
    s->peers =
        std::make_unique<InProcessPeers>(*s->hub, c.index, options.servers, options.peer_timeout);
    S3ORAM_RETURN_IF_ERROR(s->Start());
    cluster->servers_.push_back(std::move(s));
  }
  return cluster;
}

InProcessCluster::~InProcessCluster() {
  // The computations first (they wait for each other's shares), then the
  // handlers and their peers.
  for (auto& s : servers_) {
    const std::lock_guard lock(s->mu);
    s->JoinPrepare();
  }
  servers_.clear();
}

std::size_t InProcessCluster::size() const { return servers_.size(); }

std::vector<std::string> InProcessCluster::endpoints() const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < size(); ++i) out.push_back(EndpointOf(i));
  return out;
}

ServerConnector InProcessCluster::connector() {
  return [this](const ServerAddresses& addresses) -> Result<std::unique_ptr<ServerSet>> {
    if (addresses.endpoints != endpoints()) {
      return Status::InvalidArgument("these addresses do not name this in-process cluster's " +
                                     std::to_string(size()) + " servers in order");
    }
    return std::unique_ptr<ServerSet>(new Connection(*this));
  };
}

bool InProcessCluster::down(std::size_t server) const {
  const std::lock_guard lock(hub_->mu);
  return hub_->down(server);
}

void InProcessCluster::SetDown(std::size_t server, bool down) { hub_->SetDown(server, down); }

void InProcessCluster::SetDelay(std::size_t server, std::chrono::milliseconds delay) {
  const std::lock_guard lock(servers_.at(server)->mu);
  servers_[server]->delay = delay;
}

void InProcessCluster::SetLagging(std::size_t server, bool lagging) {
  const std::lock_guard lock(servers_.at(server)->mu);
  servers_[server]->lagging = lagging;
}

bool InProcessCluster::lagging(std::size_t server) const {
  const std::lock_guard lock(servers_.at(server)->mu);
  return servers_[server]->lagging;
}

void InProcessCluster::SetLiar(std::size_t server, Liar liar) {
  const std::lock_guard lock(servers_.at(server)->mu);
  servers_[server]->liar = std::move(liar);
}

void InProcessCluster::ObserveTerms(TermsObserver observer) {
  const std::lock_guard lock(hub_->mu);
  hub_->terms_observer = std::move(observer);
}

Status InProcessCluster::Restart(std::size_t server) {
  Server& s = *servers_.at(server);
  const std::lock_guard lock(s.mu);
  s.Stop();
  return s.Start();
}

Status InProcessCluster::Wipe(std::size_t server) {
  Server& s = *servers_.at(server);
  const std::lock_guard lock(s.mu);
  s.Stop();
  std::error_code ec;
  std::filesystem::remove_all(s.config.data_dir, ec);
  if (!ec) std::filesystem::create_directories(s.config.data_dir, ec);
  if (ec) return Status::IoError("wiping " + s.config.data_dir + ": " + ec.message());
  return s.Start();
}

const std::vector<std::string>& InProcessCluster::public_keys() const { return public_keys_; }

std::uint64_t InProcessCluster::applied_evictions(std::size_t server) {
  Server& s = *servers_.at(server);
  const std::lock_guard lock(s.mu);
  const serverd::ShareStore* store = s.handler->store();
  return store ? store->meta().applied_evictions : 0;
}

std::uint64_t InProcessCluster::requests_handled(std::size_t server) {
  Server& s = *servers_.at(server);
  const std::lock_guard lock(s.mu);
  return s.handled;
}

}  // namespace s3oram::testing

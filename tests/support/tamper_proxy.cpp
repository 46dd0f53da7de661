#include "tests/support/tamper_proxy.h"

#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "oramcore/crypto/curve_keys.h"
#include "oramcore/math/field.h"
#include "oramcore/wire/wire.h"

namespace s3oram::testing {

struct TamperProxy::State {
  std::mt19937_64 rng{std::random_device{}()};  // which answers to attack: test input, not keys
  std::vector<std::uint8_t> client_id;          // ROUTER identity of the (single) client
  std::map<std::uint64_t, bool> decided;        // seq -> tampered?
  struct Recorded {
    std::uint64_t epoch = 0, seq = 0;
    std::vector<field::Elem> answer;
  };
  // Recent honest answers per client epoch, oldest first (64 kept per epoch,
  // so answers of earlier epochs stay available for replay).
  std::map<std::uint64_t, std::deque<Recorded>> recorded;
};

std::unique_ptr<TamperProxy> TamperProxy::Start(const std::string& upstream,
                                                const std::string& upstream_key,
                                                const std::string& client_key_file) {
  auto own = GenerateCurveKeypair();
  auto client = LoadCurveKeypair(client_key_file);
  if (!own.ok() || !client.ok()) return nullptr;
  std::unique_ptr<TamperProxy> p(new TamperProxy());
  p->public_key_ = own->public_key;
  p->state_ = std::make_unique<State>();
  p->context_ = zmq_ctx_new();
  p->front_ = zmq_socket(p->context_, ZMQ_ROUTER);
  p->back_ = zmq_socket(p->context_, ZMQ_DEALER);
  int zero = 0;
  for (void* s : {p->front_, p->back_}) {
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof zero);
  }
  auto z = [](const Secret& k) {
    return std::string(reinterpret_cast<const char*>(k.data()), k.size());
  };
  const int one = 1;
  const std::string own_secret = z(own->secret_key), client_secret = z(client->secret_key);
  zmq_setsockopt(p->front_, ZMQ_CURVE_SERVER, &one, sizeof one);
  zmq_setsockopt(p->front_, ZMQ_CURVE_SECRETKEY, own_secret.c_str(), 41);
  zmq_setsockopt(p->back_, ZMQ_CURVE_SERVERKEY, upstream_key.c_str(), 41);
  zmq_setsockopt(p->back_, ZMQ_CURVE_PUBLICKEY, client->public_key.c_str(), 41);
  zmq_setsockopt(p->back_, ZMQ_CURVE_SECRETKEY, client_secret.c_str(), 41);
  if (zmq_bind(p->front_, "tcp://127.0.0.1:*") != 0 ||
      zmq_connect(p->back_, upstream.c_str()) != 0) {
    return nullptr;
  }
  char buf[256];
  size_t len = sizeof buf;
  zmq_getsockopt(p->front_, ZMQ_LAST_ENDPOINT, buf, &len);
  p->endpoint_ = buf;
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

TamperProxy::~TamperProxy() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (front_) zmq_close(front_);
  if (back_) zmq_close(back_);
  if (context_) zmq_ctx_term(context_);
}

std::vector<TranscriptEntry> TamperProxy::transcript() const {
  std::lock_guard<std::mutex> l(mu_);
  return transcript_;
}

void TamperProxy::ClearTranscript() {
  std::lock_guard<std::mutex> l(mu_);
  transcript_.clear();
}

void TamperProxy::Record(bool from_client, const std::vector<std::uint8_t>& frame) {
  TranscriptEntry e;
  e.from_client = from_client;
  e.bytes = frame.size();
  e.digest = 0xcbf29ce484222325ull;
  for (std::uint8_t byte : frame) e.digest = (e.digest ^ byte) * 0x100000001b3ull;
  auto msg = wire::Decode(frame);
  if (msg.ok()) {
    e.type = msg->header.type;
    e.seq = msg->header.seq;
    if (const auto* r = std::get_if<wire::RetrieveRequest>(&msg->body)) e.leaf = r->leaf;
    if (const auto* w = std::get_if<wire::WriteRootRequest>(&msg->body)) e.slot = w->slot;
    if (const auto* rw = std::get_if<wire::RetrieveWriteRootRequest>(&msg->body)) {
      e.leaf = rw->leaf;
      e.slot = rw->slot;
    }
    if (const auto* p = std::get_if<wire::EvictPrepareRequest>(&msg->body)) {
      e.leaf = p->leaf;
      e.eviction = p->eviction;
    }
    if (const auto* c = std::get_if<wire::EvictCommitRequest>(&msg->body)) e.eviction = c->eviction;
  }
  std::lock_guard<std::mutex> l(mu_);
  transcript_.push_back(e);
}

void TamperProxy::SetMode(TamperMode mode, double probability) {
  std::lock_guard<std::mutex> l(mu_);
  mode_ = mode;
  probability_ = probability;
}

namespace {

std::vector<std::uint8_t> RecvFrame(void* s, bool* more) {
  zmq_msg_t msg;
  zmq_msg_init(&msg);
  std::vector<std::uint8_t> out;
  if (zmq_msg_recv(&msg, s, ZMQ_DONTWAIT) >= 0) {
    const auto* d = static_cast<const std::uint8_t*>(zmq_msg_data(&msg));
    out.assign(d, d + zmq_msg_size(&msg));
    *more = zmq_msg_more(&msg) != 0;
  } else {
    *more = false;
  }
  zmq_msg_close(&msg);
  return out;
}

}  // namespace

void TamperProxy::SetReplyDelay(std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> l(mu_);
  reply_delay_ = delay;
}

void TamperProxy::Run() {
  using Clock = std::chrono::steady_clock;
  State& st = *state_;
  struct Held {
    Clock::time_point due;
    std::vector<std::uint8_t> id;
    std::vector<std::uint8_t> reply;
  };
  std::deque<Held> held;  // replies on their way (in order: one delay for all)
  auto send_reply = [this](const std::vector<std::uint8_t>& id,
                           const std::vector<std::uint8_t>& reply) {
    zmq_send(front_, id.data(), id.size(), ZMQ_SNDMORE);
    zmq_send(front_, reply.data(), reply.size(), 0);
  };
  while (!stop_) {
    while (!held.empty() && held.front().due <= Clock::now()) {
      send_reply(held.front().id, held.front().reply);
      held.pop_front();
    }
    long timeout = 100;
    if (!held.empty()) {
      const auto wait =
          std::chrono::duration_cast<std::chrono::milliseconds>(held.front().due - Clock::now());
      timeout = std::clamp<long>(static_cast<long>(wait.count()) + 1, 1, 100);
    }
    zmq_pollitem_t items[] = {{front_, 0, ZMQ_POLLIN, 0}, {back_, 0, ZMQ_POLLIN, 0}};
    if (zmq_poll(items, 2, timeout) <= 0) continue;
    if (items[0].revents & ZMQ_POLLIN) {  // client -> server: [id][request]
      bool more = false;
      std::vector<std::uint8_t> id = RecvFrame(front_, &more);
      if (!more) continue;
      std::vector<std::uint8_t> body = RecvFrame(front_, &more);
      st.client_id = id;
      Record(true, body);
      zmq_send(back_, body.data(), body.size(), 0);
    }
    if (items[1].revents & ZMQ_POLLIN) {  // server -> client: [reply]
      bool more = false;
      std::vector<std::uint8_t> reply = RecvFrame(back_, &more);
      auto msg = wire::Decode(reply);
      if (msg.ok()) {
        if (auto* r = std::get_if<wire::RetrieveReply>(&msg->body)) {
          ++answers_;
          TamperMode mode;
          double probability;
          {
            std::lock_guard<std::mutex> l(mu_);
            mode = mode_;
            probability = probability_;
          }
          const std::uint64_t seq = msg->header.seq, epoch = msg->header.epoch;
          auto [it, fresh] = st.decided.emplace(seq, false);
          if (fresh && mode != TamperMode::kNone &&
              std::uniform_real_distribution<double>(0, 1)(st.rng) < probability) {
            it->second = true;
          }
          const std::vector<field::Elem> honest = r->answer;
          bool changed = false;
          if (it->second) {
            if (mode == TamperMode::kBitFlip && !r->answer.empty()) {
              const std::size_t k = st.rng() % r->answer.size();
              r->answer[k] ^= field::Elem{1} << (st.rng() % 31);
              changed = true;
            } else if (mode == TamperMode::kSwap || mode == TamperMode::kReplay) {
              // Newest first: another request's answer (swap: this epoch;
              // replay: an earlier epoch).
              const std::deque<State::Recorded>* pool = nullptr;
              if (mode == TamperMode::kSwap) {
                if (auto e = st.recorded.find(epoch); e != st.recorded.end()) pool = &e->second;
              } else if (auto e = st.recorded.lower_bound(epoch); e != st.recorded.begin()) {
                pool = &std::prev(e)->second;  // the latest earlier epoch
              }
              if (pool && !pool->empty()) {
                const State::Recorded& rec = (*pool)[st.rng() % pool->size()];
                if (rec.seq != seq && rec.answer.size() == r->answer.size()) {
                  r->answer = rec.answer;
                  changed = r->answer != honest;
                }
              }
            }
            if (!changed) it->second = false;  // nothing suitable to lie with
          }
          if (it->second && fresh) ++tampered_;
          if (fresh) {
            auto& pool = st.recorded[epoch];
            pool.push_back({epoch, seq, honest});
            if (pool.size() > 64) pool.pop_front();
          }
          if (changed) reply = wire::Encode(msg->header, msg->body);
        }
      }
      Record(false, reply);
      if (!st.client_id.empty()) {
        std::chrono::milliseconds delay;
        {
          std::lock_guard<std::mutex> l(mu_);
          delay = reply_delay_;
        }
        if (delay.count() > 0) {
          held.push_back({Clock::now() + delay, st.client_id, std::move(reply)});
        } else {
          send_reply(st.client_id, reply);
        }
      }
    }
  }
}

}  // namespace s3oram::testing

// TamperProxy: a lying server for tests. It sits between the client and one
// real s3oram-serverd (ZeroMQ ROUTER in front, DEALER to the server),
// forwards every request unchanged, and with a set probability tampers with
// the server's RETRIEVE answers:
//   kBitFlip  one random bit of one random answer element is flipped;
//   kSwap     the answer to another (earlier) retrieval is returned instead;
//   kReplay   an answer recorded in an earlier client epoch is returned.
// The decision is made once per request (a resent request gets the same
// treatment), and counted, so a test knows exactly which accesses were
// attacked. Everything runs on one background thread that stops (within
// 100 ms) when the proxy is destroyed. Loopback only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace s3oram::testing {

enum class TamperMode { kNone, kBitFlip, kSwap, kReplay };

class TamperProxy {
 public:
  // Binds tcp://127.0.0.1:<free port> and connects to `upstream`.
  static std::unique_ptr<TamperProxy> Start(const std::string& upstream);
  ~TamperProxy();
  TamperProxy(const TamperProxy&) = delete;
  TamperProxy& operator=(const TamperProxy&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  void SetMode(TamperMode mode, double probability);
  // RETRIEVE requests whose answer was tampered with so far.
  std::uint64_t tampered() const { return tampered_.load(); }
  // RETRIEVE answers forwarded (tampered or not).
  std::uint64_t answers() const { return answers_.load(); }

 private:
  TamperProxy() = default;
  void Run();
  struct State;

  std::string endpoint_;
  void* context_ = nullptr;
  void* front_ = nullptr;
  void* back_ = nullptr;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> tampered_{0};
  std::atomic<std::uint64_t> answers_{0};
  std::mutex mu_;  // guards the mode and probability
  TamperMode mode_ = TamperMode::kNone;
  double probability_ = 0;
  std::unique_ptr<State> state_;
};

}  // namespace s3oram::testing

// TamperProxy: a lying and watching server for tests. It sits between the
// client and one real s3oram-serverd (ZeroMQ ROUTER in front, DEALER to the
// server) and forwards every request unchanged. It records the transcript of
// what the server sees from the client (transcript()), and with a set
// probability tampers with the server's RETRIEVE answers:
//   kBitFlip  one random bit of one random answer element is flipped;
//   kSwap     the answer to another (earlier) retrieval is returned instead;
//   kReplay   an answer recorded in an earlier client epoch is returned.
// The decision is made once per request (a resent request gets the same
// treatment), and counted, so a test knows exactly which accesses were
// attacked. SetReplyDelay makes it a slow link. Everything runs on one background thread that stops
// (within 100 ms) when the proxy is destroyed. Loopback only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "oramcore/wire/wire.h"

namespace s3oram::testing {

enum class TamperMode { kNone, kBitFlip, kSwap, kReplay };

// One message as the server sees it: its type, its size on the wire, and the
// fields that say where in the tree it acts (others zero).
struct TranscriptEntry {
  bool from_client = true;  // request (client -> server) or reply
  wire::MessageType type = wire::MessageType::kError;
  std::size_t bytes = 0;
  std::uint64_t leaf = 0;      // RETRIEVE, RETRIEVE_WRITE_ROOT and EVICT_PREPARE
  std::uint32_t slot = 0;      // WRITE_ROOT and RETRIEVE_WRITE_ROOT
  std::uint64_t eviction = 0;  // EVICT_PREPARE / EVICT_COMMIT
  std::uint64_t seq = 0;       // the header's: a resent request carries its original's
  std::uint64_t digest = 0;    // FNV-1a of the whole frame (a resend is the identical frame)
};

class TamperProxy {
 public:
  // Binds tcp://127.0.0.1:<free port> and connects to `upstream`. Both links
  // are CURVE: towards the client the proxy is a server with a keypair of
  // its own (public_key(): what the client state must list for it), towards
  // the server it is a client with the key in `client_key_file` (one the
  // server authorizes) and the server's public key `upstream_key`.
  static std::unique_ptr<TamperProxy> Start(const std::string& upstream,
                                            const std::string& upstream_key,
                                            const std::string& client_key_file);
  ~TamperProxy();
  TamperProxy(const TamperProxy&) = delete;
  TamperProxy& operator=(const TamperProxy&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  const std::string& public_key() const { return public_key_; }
  void SetMode(TamperMode mode, double probability);
  // Holds every reply this long before passing it on (a slow link).
  void SetReplyDelay(std::chrono::milliseconds delay);
  // RETRIEVE requests whose answer was tampered with so far.
  std::uint64_t tampered() const { return tampered_.load(); }
  // RETRIEVE answers forwarded (tampered or not).
  std::uint64_t answers() const { return answers_.load(); }
  // Everything recorded since the start or the last ClearTranscript().
  std::vector<TranscriptEntry> transcript() const;
  void ClearTranscript();

 private:
  TamperProxy() = default;
  void Run();
  struct State;

  std::string endpoint_;
  std::string public_key_;
  void* context_ = nullptr;
  void* front_ = nullptr;
  void* back_ = nullptr;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> tampered_{0};
  std::atomic<std::uint64_t> answers_{0};
  void Record(bool from_client, const std::vector<std::uint8_t>& frame);
  mutable std::mutex mu_;  // guards the mode, the probability and the transcript
  std::vector<TranscriptEntry> transcript_;
  TamperMode mode_ = TamperMode::kNone;
  double probability_ = 0;
  std::chrono::milliseconds reply_delay_{0};
  std::unique_ptr<State> state_;
};

}  // namespace s3oram::testing

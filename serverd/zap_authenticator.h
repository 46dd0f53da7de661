// ZapAuthenticator: the ZeroMQ authentication (ZAP, RFC 27) handler of one
// server. Every CURVE connection to a socket of its context is checked here:
// a socket's ZAP domain names the list it admits ("clients": the client
// keys in authorized_clients; "peers": the peers' public keys), and a key
// not on the list is refused (status 400) and logged with its public key and
// address, so an operator sees who was turned away and why.
//
// Runs one thread that answers on inproc://zeromq.zap.01 and stops within
// 100 ms of Stop() (or destruction). Must be started before any socket of
// the context binds, and stopped before the context is terminated.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "oramcore/base/status.h"

namespace s3oram::serverd {

class ZapAuthenticator {
 public:
  // domain -> Z85 public keys admitted in that domain.
  using Policy = std::map<std::string, std::set<std::string>>;

  ZapAuthenticator() = default;
  ~ZapAuthenticator();
  ZapAuthenticator(const ZapAuthenticator&) = delete;
  ZapAuthenticator& operator=(const ZapAuthenticator&) = delete;

  Status Start(void* context, Policy policy);
  void Stop();

 private:
  void Run();
  void* socket_ = nullptr;
  Policy policy_;
  std::map<std::string, std::uint64_t> refusals_;  // per refused key (bounded)
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

}  // namespace s3oram::serverd

// Watching proxies (tests/support/tamper_proxy.h) in front of every server
// of a filesystem: the client state at `state` is pointed at them, so its
// next open or mount talks to the servers through them and each proxy
// records its server's transcript. The filesystem must not be mounted.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/integration/cluster_fixture.h"
#include "tests/support/tamper_proxy.h"

namespace s3oram::testing {

// One proxy per server, in party order; empty (a test failure recorded) if
// one cannot start.
inline std::vector<std::unique_ptr<TamperProxy>> WatchEveryServer(const std::string& state,
                                                                  const cluster::LocalCluster& cl) {
  std::vector<std::unique_ptr<TamperProxy>> proxies;
  for (std::size_t i = 0; i < cl.endpoints().size(); ++i) {
    auto proxy =
        TamperProxy::Start(cl.endpoints()[i], cl.server_public_keys()[i], cl.client_key_file());
    if (!proxy) {
      ADD_FAILURE() << "the proxy in front of server " << i << " did not start";
      return {};
    }
    RepointServer(state, static_cast<int>(i), proxy->endpoint(), proxy->public_key());
    proxies.push_back(std::move(proxy));
  }
  return proxies;
}

}  // namespace s3oram::testing

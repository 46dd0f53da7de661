// ServerDown: why, and since when, a client counts one of its servers as down
// (wire/liveness_monitor.h decides it; wire/server_set.h's DownStatus words
// the failure of a request to it).
#pragma once

#include <chrono>
#include <string>

namespace s3oram {

struct ServerDown {
  std::chrono::system_clock::time_point since;  // the first check it failed
  std::string reason;  // "it did not answer a liveness check (STATUS) within 2.0 s"
  // When the latest check it failed was sent: a verdict about a request
  // counts only if this is after the request was.
  std::chrono::steady_clock::time_point last_failed_check;
};

// "since 14:03:07 UTC: <reason>", for messages.
std::string DescribeDown(const ServerDown& down);

}  // namespace s3oram

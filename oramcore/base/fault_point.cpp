#include "oramcore/base/fault_point.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace s3oram {

namespace {

struct Armed {
  std::string name;
  std::atomic<long> remaining;
  long sleep_ms = 0;  // "name~ms": sleep there every time instead of dying
  std::string hold_path;  // "name?path": wait there while `path` exists
};

// A hold ends when its file is removed, or after this long whatever happens
// (a test that dies leaves no process waiting for ever).
constexpr auto kLongestHold = std::chrono::minutes(10);

std::once_flag g_once;
std::atomic<bool> g_any{false};
// Fixed after the once-initialisation; each entry's counter is atomic.
std::deque<Armed>* g_points = nullptr;

void Parse() {
  const char* spec = std::getenv("S3ORAM_FAULT");
  if (spec == nullptr || *spec == '\0') return;
  auto* points = new std::deque<Armed>();  // lives as long as the process
  std::string all(spec);
  std::size_t pos = 0;
  while (pos <= all.size()) {
    std::size_t end = all.find(',', pos);
    if (end == std::string::npos) end = all.size();
    std::string item = all.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    long n = 1;
    long sleep_ms = 0;
    std::string hold_path;
    if (std::size_t q = item.find('?'); q != std::string::npos) {
      hold_path = item.substr(q + 1);
      item.resize(q);
    }
    if (std::size_t tilde = item.find('~'); tilde != std::string::npos) {
      sleep_ms = std::max(0L, std::strtol(item.c_str() + tilde + 1, nullptr, 10));
      item.resize(tilde);
    }
    if (std::size_t at = item.find('@'); at != std::string::npos) {
      n = std::strtol(item.c_str() + at + 1, nullptr, 10);
      item.resize(at);
      if (n < 1) n = 1;
    }
    points->emplace_back();
    points->back().name = item;
    points->back().remaining.store(n);
    points->back().sleep_ms = sleep_ms;
    points->back().hold_path = hold_path;
  }
  g_points = points;
  g_any.store(!points->empty(), std::memory_order_release);
}

}  // namespace

void FaultPoint(const char* name) {
  std::call_once(g_once, Parse);
  if (!g_any.load(std::memory_order_acquire)) return;
  for (auto& p : *g_points) {
    if (!p.hold_path.empty() && p.name == name) {
      const auto until = std::chrono::steady_clock::now() + kLongestHold;
      while (::access(p.hold_path.c_str(), F_OK) == 0 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      continue;
    }
    if (p.sleep_ms > 0 && p.name == name) {
      std::this_thread::sleep_for(std::chrono::milliseconds(p.sleep_ms));
      continue;
    }
    if (p.name == name && p.remaining.fetch_sub(1) == 1) {
      static const char kMsg[] = "s3oram: fault point reached, killing this process\n";
      (void)!::write(2, kMsg, sizeof kMsg - 1);
      ::kill(::getpid(), SIGKILL);
    }
  }
}

}  // namespace s3oram

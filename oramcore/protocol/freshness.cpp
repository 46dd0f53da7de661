#include "oramcore/protocol/freshness.h"

#include <algorithm>
#include <functional>
#include <map>

namespace s3oram {

std::uint64_t AgreedAtLeast(std::span<const std::uint64_t> values, std::size_t k) {
  if (k == 0 || values.size() < k) return 0;
  std::vector<std::uint64_t> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  return sorted[k - 1];
}

std::uint64_t NewestAgreedGeneration(std::span<const ServerFreshness> servers, std::size_t k) {
  std::map<std::uint64_t, std::size_t> holders;
  for (const auto& s : servers) {
    std::vector<std::uint64_t> g = s.generations;
    std::sort(g.begin(), g.end());
    g.erase(std::unique(g.begin(), g.end()), g.end());  // a server counts once
    for (std::uint64_t x : g) ++holders[x];
  }
  for (auto it = holders.rbegin(); it != holders.rend(); ++it) {
    if (it->second >= k) return it->first;
  }
  return 0;
}

FreshnessVerdict JudgeFreshness(const Counters& state, const std::optional<BackupMark>& mark,
                                std::span<const ServerFreshness> servers,
                                std::span<const std::string> names, std::size_t t,
                                bool eviction_pending) {
  FreshnessVerdict v;
  const std::size_t k = t + 1;
  std::vector<std::uint64_t> epochs, evictions;
  for (const auto& s : servers) {
    epochs.push_back(s.store_epoch);
    evictions.push_back(s.applied_evictions);
  }
  v.agreed_store_epoch = AgreedAtLeast(epochs, k);
  v.agreed_generation = NewestAgreedGeneration(servers, k);
  const std::uint64_t agreed_evictions = AgreedAtLeast(evictions, k);
  auto name = [&](std::size_t i) { return i < names.size() ? names[i] : "server " + std::to_string(i); };

  std::vector<std::string> reasons;
  if (v.agreed_store_epoch > state.epoch) {
    reasons.push_back("the servers' tree was last changed under epoch " +
                      std::to_string(v.agreed_store_epoch) + ", after this state's last use (epoch " +
                      std::to_string(state.epoch) + ")");
  }
  // What the state accounts for: its own count, and its pending eviction.
  const std::uint64_t accounted = state.ne + (eviction_pending ? 1 : 0);
  if (agreed_evictions > accounted) {
    reasons.push_back("the servers have applied " + std::to_string(agreed_evictions) +
                      " evictions but this state knows " + std::to_string(state.ne));
  }
  if (mark && v.agreed_generation > mark->generation) {
    reasons.push_back("state backup generation " + std::to_string(v.agreed_generation) +
                      " was uploaded after generation " + std::to_string(mark->generation) +
                      ", the newest this state has seen");
  }
  v.stale = !reasons.empty();
  for (std::size_t i = 0; i < reasons.size(); ++i) v.why += (i ? "; " : "") + reasons[i];

  for (std::size_t i = 0; i < servers.size(); ++i) {
    const auto& s = servers[i];
    if (s.applied_evictions > std::max(agreed_evictions, accounted) && v.inconsistent.empty()) {
      v.inconsistent = name(i) + " reports " + std::to_string(s.applied_evictions) +
                       " applied evictions, but no " + std::to_string(k) +
                       " servers agree on more than " + std::to_string(agreed_evictions) +
                       (eviction_pending ? "" : " and this state has no eviction pending") +
                       ": its share store cannot match the others' (damaged, replaced or "
                       "lying); repair it with s3oram rebuild --server " +
                       std::to_string(i) + " --force";
    }
    if (s.store_epoch > std::max(v.agreed_store_epoch, state.epoch)) {
      v.warnings.push_back(name(i) + " alone reports tree changes under epoch " +
                           std::to_string(s.store_epoch) + ", which fewer than " +
                           std::to_string(k) + " servers confirm: ignored for freshness");
    }
    std::uint64_t newest = 0;
    for (std::uint64_t g : s.generations) newest = std::max(newest, g);
    if (mark && newest > std::max(v.agreed_generation, mark->generation)) {
      v.warnings.push_back(name(i) + " lists backup generation " + std::to_string(newest) +
                           ", which fewer than " + std::to_string(k) +
                           " servers hold: ignored for freshness");
    }
  }
  return v;
}

}  // namespace s3oram

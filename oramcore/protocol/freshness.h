// Freshness: is a client state the newest one, or has another device (or
// another copy of the state) used the filesystem since? Decided from what the
// servers report, never from one server alone.
//
// A state is stale when t + 1 servers agree that one of these moved past it:
//   - the store epoch (the last epoch that changed the tree): another client
//     read or wrote blocks, so this state's positions and root counter may be
//     wrong;
//   - the eviction count, by more than the one eviction a state may have
//     pending (by any when it has none pending);
//   - the newest complete state backup generation, past the generation this
//     state last uploaded or was restored from (its BackupMark): another
//     device ended a session and uploaded its state, which may hold metadata
//     changes (a rename, a mkdir) that touched no block at all.
// One server alone above the others cannot make a state stale (a lying or
// damaged server, or a request that reached only it before its client
// crashed); it is named in a warning. One server alone reporting more
// evictions than t + 1 agree on, and than the state may have pending, is
// named as inconsistent with its repair (a forced rebuild): its tree cannot
// match the others'. (A server one eviction ahead is only possible while
// that eviction is pending in the state: it committed there first.) Values t + 1 servers agree on
// are the (t + 1)-th largest reported, so t servers can neither invent nor hide a newer use.
//
// Pure: the caller queries the servers.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "oramcore/state/client_state.h"

namespace s3oram {

struct ServerFreshness {
  std::uint64_t store_epoch = 0;        // STATUS epoch
  std::uint64_t applied_evictions = 0;  // STATUS
  std::vector<std::uint64_t> generations;  // complete backup generations (BACKUP_LIST)
};

struct FreshnessVerdict {
  bool stale = false;
  std::string why;  // when stale: what moved past the state, for the error message
  // A server whose eviction count t + 1 others do not back: its tree cannot
  // be the one this filesystem has. Empty when none.
  std::string inconsistent;
  std::vector<std::string> warnings;  // lone servers ahead, named
  std::uint64_t agreed_store_epoch = 0;
  std::uint64_t agreed_generation = 0;  // 0: no generation held by t + 1 servers
};

// The largest v such that at least k of `values` are >= v (0 if fewer than k
// values): with k = t + 1, a value no t liars can raise or lower past an
// honest majority's.
std::uint64_t AgreedAtLeast(std::span<const std::uint64_t> values, std::size_t k);

// The newest generation that at least k servers list as complete (0: none).
std::uint64_t NewestAgreedGeneration(std::span<const ServerFreshness> servers, std::size_t k);

// `names[i]` names server i in messages ("server 1 (tcp://...)").
// `eviction_pending`: the state records an eviction under way (eviction
// state.ne), which may have committed on some servers already.
FreshnessVerdict JudgeFreshness(const Counters& state, const std::optional<BackupMark>& mark,
                                std::span<const ServerFreshness> servers,
                                std::span<const std::string> names, std::size_t t,
                                bool eviction_pending = true);

}  // namespace s3oram

// SmpInbox: the SMP shares a server has received from its peers and not yet
// used, keyed by (eviction, attempt, round, sender).
//
// Guarantees (docs/SECURITY.md, transport):
//  * What one peer can make this server hold is bounded: at most
//    kPerSender entries per sender (an honest peer is at most one round
//    ahead of this server, so it never has more than two waiting), each no
//    larger than the peers' frame limit (wire/message_limits.h, enforced by
//    ZeroMQ before a frame is buffered). A new entry beyond the bound
//    replaces that sender's oldest one, never another sender's.
//  * What one peer sends never removes another peer's entries, and no peer
//    can end a computation: which attempt of an eviction is current is the
//    client's to say (its EVICT_PREPARE), not a peer's.
//  * The sender is the caller's to authenticate (the CURVE key ZeroMQ
//    reports for the frame); the inbox trusts the index it is given.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "oramcore/math/field.h"

namespace s3oram::serverd {

class SmpInbox {
 public:
  using Key = std::tuple<std::uint64_t, std::uint32_t, std::uint32_t, std::uint32_t>;
  static constexpr std::size_t kPerSender = 4;

  // Stores `shares` under key (replacing an entry with the same key). Entries
  // of evictions before `applied` (committed here) are dropped first, and the
  // new one too if it is one of them.
  void Put(const Key& key, std::vector<field::Elem> shares, std::uint64_t applied);
  bool Has(const Key& key) const { return entries_.count(key) != 0; }
  // The entry's shares (it must exist); they stay until Release.
  std::vector<field::Elem>& At(const Key& key) { return entries_.at(key); }
  // Removes the entry, handing its vector back for reuse (empty if absent).
  std::vector<field::Elem> Release(const Key& key);
  void Clear() { entries_.clear(); }
  std::size_t size() const { return entries_.size(); }
  // Entries from `sender`.
  std::size_t CountFrom(std::uint32_t sender) const;

 private:
  std::map<Key, std::vector<field::Elem>> entries_;
};

}  // namespace s3oram::serverd

// RebuildTermsInbox: the masked rebuild terms (REBUILD_TERMS) this server,
// the target K of a rebuild or catch-up, has received from the survivors and
// not yet summed, keyed by (session nonce, first bucket, sender).
//
// Guarantees (docs/SECURITY.md, transport):
//  * What one peer can make this server hold is bounded: at most
//    kPerSender entries per sender (an honest survivor sends one range and
//    waits for the client, which asks K to sum it before the next), each no
//    larger than the peers' frame limit (wire/message_limits.h). A new entry
//    beyond the bound replaces that sender's oldest, never another sender's.
//  * An entry is taken only with the hole map the client names: terms read
//    again densely (the survivors' hole maps differed) replace the sparse
//    ones under the same key, and a stale entry is never summed.
//  * The sender is the caller's to authenticate (the CURVE key ZeroMQ
//    reports for the frame); the inbox trusts the index it is given.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/wire/wire.h"

namespace s3oram::serverd {

class RebuildTermsInbox {
 public:
  using Key = std::tuple<wire::RebuildNonce, std::uint64_t, std::uint32_t>;
  static constexpr std::size_t kPerSender = 2;

  // Keeps m's holes and terms under (m.nonce, m.first_bucket, m.from_index),
  // replacing an entry with that key.
  void Put(wire::RebuildTerms&& m);
  // Whether the entry exists with exactly these holes.
  bool Has(const Key& key, const std::vector<std::uint8_t>& holes) const;
  // Removes and returns the entry's terms if it exists with these holes.
  std::optional<std::vector<field::Elem>> Take(const Key& key,
                                               const std::vector<std::uint8_t>& holes);
  void Clear() { entries_.clear(); }
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::uint64_t order = 0;  // arrival, to drop a sender's oldest
    std::vector<std::uint8_t> holes;
    std::vector<field::Elem> terms;
  };
  std::map<Key, Entry> entries_;
  std::uint64_t arrivals_ = 0;
};

}  // namespace s3oram::serverd

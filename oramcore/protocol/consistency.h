// Consistency of the servers' sharings, checked without revealing anything
// (wire.h PARITY and EVICT_CHECK): each server returns, per slot, the digest
// of its share under a public key the client drew afterwards; digests are
// linear, so the parity checks of the code (shamir::ParityChecks) applied to
// the servers' digests of one slot are zero when its shares lie on one
// polynomial of degree t, and nonzero with probability 1 - p^-2 otherwise.
//
// What it guarantees: a slot whose shares are inconsistent (one server's disk
// or memory changed it after the digests it stores were computed, or an
// eviction computed or dealt it wrongly) is found, unless a server answers
// about other shares than it keeps, which only a server that lies on purpose
// does (docs/SECURITY.md). It cannot say which server is wrong: with three
// servers and t = 1, any one share may be the odd one out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/math/share_mac.h"

namespace s3oram {

// Slot indices (into each server's digest list, kParityElemsPerSlot elements
// per slot) whose parity checks fail. A slot that some server flags in
// `skip` (its damaged flags; may be empty, or hold one list per server) is
// left out: its damage is already named. Lists of different lengths (a
// malformed reply) must not pass: every slot is then reported.
std::vector<std::size_t> InconsistentSlots(
    const std::vector<std::vector<field::Elem>>& parity_rows,
    std::span<const std::vector<field::Elem>> digests,
    std::span<const std::vector<std::uint8_t>> skip = {});

// Which server holds the odd share of one slot whose shares are inconsistent
// (shares[i] is party i's share, all of one length): the k for which the
// shares of every other party, interpolated at zero, open to a value that
// carries a valid share MAC (math/share_mac.h), if exactly one k does. With
// three parties and t = 1 that is the pair of servers that agree on an
// authentic value; the third is wrong. nullopt when no such k or more than one
// exists (two servers wrong, or shares of other lengths): not attributable.
// The honest value of a dummy slot is zero, which is authentic, so dummy
// slots are attributed like live ones. shares[k] is party parties[k]'s (at
// its point shamir::PartyX); without `parties`, party k's.
std::optional<std::size_t> OddShareOut(std::span<const std::vector<field::Elem>> shares,
                                       const share_mac::ShareMacKey& key,
                                       std::span<const std::size_t> parties = {});
// The same with `authentic` deciding whether an opened value carries a valid
// MAC (e.g. BlockCodec::CombinationMacValid for a random combination of
// slots, which holds for either key while a rekey is under way). Every share
// must have `elems` elements.
std::optional<std::size_t> OddShareOut(
    std::span<const std::vector<field::Elem>> shares, std::size_t elems,
    const std::function<bool(std::span<const field::Elem>)>& authentic,
    std::span<const std::size_t> parties = {});

}  // namespace s3oram

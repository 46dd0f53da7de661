// Seeded shares (wire::ShareSeed): the one place that turns a share's seed
// into its elements, for the client that draws it and for the server that
// expands it. A degree-1 sharing may have one share drawn at random, so that
// party can be sent the seed of its share instead of the share: the client
// uploads ℓ - 1 shares per secret instead of ℓ (docs/SECURITY.md, "Seeded
// shares", says why a server's view stays independent of the data).
//
// Guarantees: a seed is 32 bytes from the OS CSPRNG, drawn afresh for every
// share (never reused: two secrets shared through one seed's elements would
// differ by a known multiple of their difference at every other party), and
// expands the same way on every machine; ExpandShareSeeds bounds what a
// request may make a server allocate by the wire's own vector limit.
#pragma once

#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/field.h"
#include "oramcore/wire/wire.h"

namespace s3oram::wire {

// A fresh seed for a share of `count` elements.
ShareSeed NewShareSeed(std::uint32_t count);
// The elements `seed` stands for (seed.count of them).
std::vector<Elem> ExpandShareSeed(const ShareSeed& seed);
// Replaces every seed of `m` (RETRIEVE, WRITE_ROOT, RETRIEVE_WRITE_ROOT,
// EVICT_PREPARE) by the elements it stands for. InvalidArgument, naming the
// field, for a seed beside elements, a nonzero seed with count 0, or a count
// over kMaxElems; other messages are left alone.
Status ExpandShareSeeds(Message& m);

}  // namespace s3oram::wire

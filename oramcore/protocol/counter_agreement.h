// Counters a client adopts from the servers (the lease epoch, the backup
// generation, the applied request sequence, the eviction count): never one
// server's word alone.
//
// Each server reports its value; the client's own durable value is a floor
// it trusts. The agreed value is the larger of that floor and the value
// t + 1 servers report at least (AgreedAtLeast). A server above the agreed
// value by at most kMaxCounterLead is believed: a request that reached only
// some servers before its client stopped (a lease granted by one server, a
// backup completed on one) leaves exactly that. A server further above is an
// outlier: its record is damaged or forged. It is named, and its value is
// never adopted, so never copied to the other servers.
//
// Guarantee: t servers together can raise an adopted counter by at most
// kMaxCounterLead per adoption (2^44 adoptions to exhaust 64 bits), and
// cannot lower it below what t + 1 servers or the client's own state hold.
// A lockout (a counter at the end of its range on honest servers) needs
// t + 1 servers agreeing.
//
// Pure: the caller queries the servers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "oramcore/base/status.h"

namespace s3oram {

// How far one server may lead the agreed value and still be believed.
inline constexpr std::uint64_t kMaxCounterLead = std::uint64_t{1} << 20;

struct AdoptedCounter {
  std::uint64_t agreed = 0;           // max(floor, what t + 1 servers report at least)
  std::uint64_t value = 0;            // agreed, raised to the largest report within kMaxCounterLead
  std::vector<std::size_t> outliers;  // servers reporting more than agreed + kMaxCounterLead
};

AdoptedCounter AdoptCounter(std::span<const std::uint64_t> reports, std::uint64_t floor,
                            std::size_t t);

// One above the adopted value: the next value every server must accept (a
// new lease epoch, a new backup generation). FailedPrecondition naming the
// first outlier, `what` it reports and the repair (a forced rebuild of that
// server, which replaces its store, lease record and backups); or, if t + 1
// servers agree on the last value there is, naming no single server.
// `name(i)` names server i ("server 1 (tcp://...)").
Result<std::uint64_t> NextAgreedCounter(std::span<const std::uint64_t> reports, std::uint64_t floor,
                                        std::size_t t, const std::string& what,
                                        const std::function<std::string(std::size_t)>& name);

// The error NextAgreedCounter returns for an outlier, for callers that adopt
// a value without going one above it (the sequence, the eviction count).
Status CounterOutlierError(const AdoptedCounter& c, std::span<const std::uint64_t> reports,
                           std::size_t t, const std::string& what,
                           const std::function<std::string(std::size_t)>& name);

}  // namespace s3oram

// Time per access over a network, from the byte counts of the cost model
// (params.h) and a link profile: what `s3oram params --profile` prints and
// what bench/net-bench measures (docs/PERFORMANCE.md, "Over a network").
//
// The model is a sum of serial phases, one access at a time (the client runs
// one access at a time; it overlaps nothing with the next):
//   access    the retrieval request with the previous access's root write to
//             every server over the client's uplink (the three requests share
//             that link), one client round trip, the servers' path read, the
//             answers over the downlink;
//   eviction  once per A accesses: the last root write sent alone (one round
//             trip), the matrix shares over the uplink, H+1 rounds of share
//             exchange between servers (each server sends a bucket share to
//             each peer over its own link: Z m elements per peer per level,
//             two buckets in the leaf round) with one server round trip per
//             round, the eviction product on each server, and the commit
//             round trip.
// Bandwidth is the payload rate: the profile's link rate less the TCP/IP
// header share of full-sized segments (kHeaderOverhead).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oramcore/tree/params.h"

namespace s3oram {

struct LinkProfile {
  std::string name;
  double client_down_bps = 0;   // bits/s, servers -> client
  double client_up_bps = 0;     // bits/s, client -> servers (shared by the three)
  double client_one_way_s = 0;  // one-way delay client <-> each server
  double server_bps = 0;        // bits/s, each server's link to its peers
  double server_one_way_s = 0;  // one-way delay between servers
  std::string description;
};

// The profiles bench/net-bench emulates: paper-home, paper-lte, lan.
const std::vector<LinkProfile>& NamedLinkProfiles();
std::optional<LinkProfile> FindLinkProfile(std::string_view name);

// Ethernet + IPv4 + TCP (with timestamps) headers per 1448-byte segment.
inline constexpr double kHeaderOverhead = 1.0 + 66.0 / 1448.0;

struct LinkPrediction {
  double access_s = 0;          // per access, eviction excluded
  double eviction_s = 0;        // one eviction
  double per_access_s = 0;      // access_s + eviction_s / A
  double user_bytes_per_s = 0;  // B / per_access_s
  // Payload bytes per user byte on each link class (the cost model / B).
  double client_up_per_user_byte = 0;
  double client_down_per_user_byte = 0;
  double server_peer_per_user_byte = 0;
  // The largest share of per_access_s: "client uplink", "client downlink",
  // "round trips", "server links", "server compute".
  std::string bottleneck;
};

// How fast one server computes: the path inner product of a retrieval streams
// Z (H+1) slots (read_bytes_per_s), an eviction multiplies a 2Z x Z matrix
// share into each of H+1 bucket pairs (macs_per_s multiply-accumulates of
// field elements). 0 leaves that term out.
struct ServerSpeed {
  double read_bytes_per_s = 0;
  double macs_per_s = 0;
  // Seconds per access with no network at all (e.g. `s3oram bench` on this
  // machine at the same parameters), eviction amortised: when > 0 it stands
  // for every local cost (path reads, kernels, disk writes and syncs, SQLite
  // commits, scheduling) and replaces the two rates above.
  double local_access_s = 0;
};

LinkPrediction PredictOverLink(const OramParams& p, const LinkProfile& link,
                               const ServerSpeed& speed);

}  // namespace s3oram

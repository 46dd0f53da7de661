// What an OramClient counts while it runs (OramClient::stats): accesses,
// evictions and where their time went. Plain counters, no invariants.
#pragma once

#include <cstdint>
#include <vector>

namespace s3oram {

// Where the client's access time went, summed over every access since Open
// (nanoseconds of wall clock). The waits include the servers' work and the
// network; the servers' own STATS split them further.
struct AccessTimings {
  std::uint64_t client_compute_ns = 0;   // select and root sharing, encoding, recovery, open, seal
  std::uint64_t retrieve_wait_ns = 0;    // RETRIEVE sent until every answer is in
  std::uint64_t root_write_wait_ns = 0;  // WRITE_ROOT sent until every server acknowledged
  std::uint64_t state_commit_ns = 0;     // the access's SQLite commit
  std::uint64_t eviction_ns = 0;         // whole evictions; the four below are parts of it
  std::uint64_t eviction_client_ns = 0;  // planning, matrices, sharing them, encoding
  std::uint64_t eviction_prepare_wait_ns = 0;
  std::uint64_t eviction_commit_wait_ns = 0;
  std::uint64_t eviction_state_commit_ns = 0;  // intent and result records (durable)
  std::uint64_t eviction_check_ns = 0;  // EVICT_CHECK: prepared buckets consistent everywhere
  std::uint64_t eviction_pace_ns =
      0;  // accesses held back to the eviction beside them (EvictionPacer)
};

struct ClientStats {
  std::uint64_t accesses = 0;
  std::uint64_t evictions = 0;
  std::uint64_t eviction_retries = 0;
  // Per server: retrieval answers found wrong and outvoted by the others
  // (only with more than 2t + 1 servers; empty until one was).
  std::vector<std::uint64_t> wrong_answers;
  // Per server: retrieval answers an access did not wait for (the server
  // lagged, ServerSet::Wait::kQuorum; only with more than 2t + 1 servers;
  // empty until one was).
  std::vector<std::uint64_t> lagged_answers;
  AccessTimings timings;
};

}  // namespace s3oram

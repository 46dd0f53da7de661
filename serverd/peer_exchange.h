// The server-to-server side of the protocol, as the request handler sees it:
//  * an eviction's SMP degree-reduction round = send this server's
//    re-shared product to every peer, then wait for every peer's shares of
//    the same round;
//  * a rebuild's masked terms: a survivor sends its terms of a range to the
//    target (SendTerms), and the target waits for every participant's
//    (AwaitTerms) before it sums them.
//
// Server implements it over ZeroMQ (a PUSH per peer for the SMP rounds,
// another per peer for rebuild terms, one PULL, buffers of early
// arrivals); tests/support/in_process_cluster.cpp and the request-handler
// fuzz harness implement it in process. The handler never trusts what Await
// or AwaitTerms returns: it checks every peer's vector against the length
// it needs before combining.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/field.h"
#include "oramcore/wire/wire.h"

namespace s3oram::serverd {

// Identifies one round of one attempt of one eviction, and whose shares it
// needs: the attempt's other participants (bit p: peer p).
struct SmpRound {
  std::uint64_t eviction = 0;
  std::uint32_t attempt = 0;
  std::uint32_t round = 0;
  std::uint32_t from = 0;
};

// The terms one REBUILD_WRITE sums: of this session and range, with this
// hole map, from each of `from` (ascending party indices).
struct TermsWanted {
  wire::RebuildNonce nonce{};
  std::uint64_t first_bucket = 0;
  std::vector<std::uint8_t> holes;
  std::vector<std::uint32_t> from;
};

class PeerExchange {
 public:
  virtual ~PeerExchange() = default;

  // Sends frames[p], party p's encoded SMP_SHARES of one round
  // (serverd/smp_frames.h), to every peer p whose frame is not empty (an
  // empty one: p takes no part in this attempt). `frames` has one entry per
  // party, indexed by party index (this server's own is not sent); none is
  // changed, so the caller reuses them for the next round.
  virtual Status Send(const std::vector<std::vector<std::uint8_t>>& frames) = 0;
  // Waits until the shares of round r from every peer in r.from have arrived
  // (or fails: timeout, attempt superseded, transport error). Returns one
  // span per such peer in ascending peer-index order, valid until Release(r) or the next call
  // into this object. Lengths are whatever the peers sent.
  virtual Result<std::vector<std::span<const field::Elem>>> Await(const SmpRound& r) = 0;
  // Forgets the shares of round r (they have been combined).
  virtual void Release(const SmpRound& r) = 0;
  // Forgets every buffered share (a new store replaced the old one).
  virtual void Reset() = 0;
  // Frees the buffers kept for the next round (the eviction is over): an idle
  // server holds no eviction-sized memory.
  virtual void Trim() {}
  // Sends `frame`, an encoded REBUILD_TERMS, to peer `target`, queued
  // without waiting for it: Unavailable if its queue is full, InvalidArgument
  // if `target` is not a peer. Used by the thread that runs requests, never
  // by an eviction's computation (which may run beside it).
  virtual Status SendTerms(std::uint32_t target, std::span<const std::uint8_t> frame) = 0;
  // Waits until the terms of w.nonce and w.first_bucket with hole map
  // w.holes have come from every peer in w.from, or the peer timeout
  // passes (Unavailable naming the peers that sent none). Returns them in
  // w.from's order, taken out of the buffer. Lengths are whatever the peers
  // sent.
  virtual Result<std::vector<std::vector<field::Elem>>> AwaitTerms(const TermsWanted& w) = 0;
  // SMP and rebuild bytes sent to peers since this process started (for STATUS).
  virtual std::uint64_t bytes_sent() const = 0;
};

}  // namespace s3oram::serverd

// Pairwise zero-sum masks for the server rebuild (docs/ARCHITECTURE.md,
// "Rebuilding a lost server").
//
// The t + 1 survivors S each send the client c_j = L_j(x_K) s_j + r_j with
// sum_{j in S} r_j = 0, so that K can sum the c_j into its share while nobody
// who sees a single c_j (the client, K) learns anything about s_j. The r_j
// come from one seed per pair {i, j} of S, which both members derive without
// exchanging a message:
//   seed_ij = BLAKE2b-256( X25519(own CURVE secret, peer CURVE public)
//                          || session nonce || lower public key || higher public key
//                          || "s3oram rebuild mask" )
// (public keys ordered bytewise, so both ends hash the same bytes). The member
// with the lower party index adds PRG(seed_ij, bucket), the other subtracts
// it, so the masks of all participants sum to zero element by element. The
// CURVE keys are the servers' ZeroMQ keys (Curve25519, usable with X25519);
// the client knows only public keys and cannot compute any seed. A fresh
// 32-byte nonce per run makes every run's masks independent.
//
// PRG(seed, bucket): the XChaCha20 keystream under key = seed and nonce = the
// bucket number (u64 little-endian, zero-padded to 24 bytes), read as 32-bit
// little-endian words with the top bit cleared; the one 31-bit value that is
// not below p = 2^31 - 1 (p itself) is rejected and the stream continues, so
// every element is exactly uniform in F_p (no modulo bias).
//
// Everything here is pure given its inputs (no files, no sockets), so the unit
// tests check the zero-sum, determinism and per-session independence.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"
#include "oramcore/math/field.h"

namespace s3oram::serverd::rebuild {

using field::Elem;

inline constexpr std::size_t kKeyBytes = 32;    // X25519 keys
inline constexpr std::size_t kSeedBytes = 32;   // XChaCha20 key
inline constexpr std::size_t kNonceBytes = 32;  // session nonce
using PublicKey = std::array<std::uint8_t, kKeyBytes>;
using SessionNonce = std::array<std::uint8_t, kNonceBytes>;

// The seed shared by this server (own_secret: 32-byte X25519 secret key, with
// public key own_public) and a peer (peer_public) for the rebuild of server
// `target` by `participants` under the client's session nonce. Symmetric:
// both ends get the same seed. Bound to the target and the participants
// too, so that a nonce used again for another target or set (four servers
// and more allow several) still gives new masks. InvalidArgument if the
// shared point is degenerate (a low-order peer key) or the two public keys
// are equal.
Result<Secret> PairSeed(const Secret& own_secret, const PublicKey& own_public,
                        const PublicKey& peer_public, const SessionNonce& nonce,
                        std::uint32_t target, std::span<const std::uint32_t> participants);

// out = PRG(seed, bucket)[0 .. out.size()): uniform field elements.
void MaskStream(const Secret& seed, std::uint64_t bucket, std::span<Elem> out);

// One pair this server belongs to, and whether it adds (+) or subtracts (-)
// that pair's stream (+ for the lower party index of the pair).
struct PairMask {
  Secret seed;
  bool add = true;
};

// inout[k] += sum over pairs of (+/-) PRG(pair.seed, bucket)[k]; scratch is
// resized as needed (reused across calls to avoid allocations).
void ApplyMasks(std::span<const PairMask> pairs, std::uint64_t bucket, std::span<Elem> inout,
                std::vector<Elem>& scratch);

}  // namespace s3oram::serverd::rebuild

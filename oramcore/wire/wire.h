// The s3oram wire protocol: every message between client and servers, and
// between servers, with its one encoder and one decoder.
//
// Frame (all integers little-endian):
//   magic   u32  'S3OR' (0x524f3353)
//   version u16  kWireVersion; a decoder refuses any other
//   type    u16  MessageType
//   fs_id   16 bytes        filesystem the message is about (zero in STATUS/INIT to an empty
//   server) epoch   u64             client epoch (fencing) seq     u64             client sequence
//   number; replies echo the request's length  u32             body length; must equal the bytes
//   that follow body    `length` bytes  per type, below
// Vectors of field elements are a u32 count followed by the elements packed at
// 31 bits each (oramcore/math/elem_packing.h: ceil(31 count / 8) bytes, each < p,
// zero padding bits). Strings are a u32 length then bytes. Flag vectors are a u32 count then
// one byte (0 or 1) each; index lists a u32 count (<= kMaxParties) then u32s. The
// decoder checks every length against the bytes actually present before allocating, checks every
// element is canonical, rejects trailing bytes, and caps vectors at kMaxElems.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "oramcore/base/ids.h"
#include "oramcore/base/status.h"
#include "oramcore/math/elem_packing.h"
#include "oramcore/math/field.h"
#include "oramcore/wire/wire_limits.h"

namespace s3oram::wire {

using field::Elem;
using FsId = s3oram::FsId;

inline constexpr std::uint32_t kMagic = 0x524f3353;  // "S3OR"
// 2: element vectors packed at 31 bits (1 sent each as a u32).
// 3: PARITY and EVICT_CHECK; EVICT_CHECK_REPLY carries the MAC combinations.
// 4: STATUS_REPLY tells an eviction's progress.
// 5: background eviction: EVICT_PREPARE is answered with EVICT_STARTED once
//    the server has snapshotted the root, and EVICT_RESULT waits for the end.
// 6: BACKUP_PUT and BACKUP_LIST carry the key epoch.
// 7: RETRIEVE, WRITE_ROOT, RETRIEVE_WRITE_ROOT and EVICT_PREPARE may carry a
//    share as its seed (ShareSeed).
// 10: a rebuild's masked terms go from the survivors straight to the target
//    (REBUILD_TERMS), no longer through the client.
inline constexpr std::uint16_t kWireVersion = 10;
inline constexpr std::size_t kHeaderBytes = 4 + 2 + 2 + 16 + 8 + 8 + 4;
// Bytes of a rebuild session nonce.
inline constexpr std::size_t kRebuildNonceBytes = 32;

enum class MessageType : std::uint16_t {
  kError = 1,
  kStatusRequest = 2,
  kStatusReply = 3,
  kInitRequest = 4,
  kInitReply = 5,
  kRetrieveRequest = 6,
  kRetrieveReply = 7,
  kWriteRootRequest = 8,
  kWriteRootReply = 9,
  kEvictPrepareRequest = 10,
  kEvictPrepareReply = 11,
  kEvictCommitRequest = 12,
  kEvictCommitReply = 13,
  kSmpShares = 14,  // server -> server, no reply
  kLeaseAcquireRequest = 15,
  kLeaseReply = 16,
  kLeaseReleaseRequest = 17,
  kLeaseQueryRequest = 18,
  // Server rebuild (docs/ARCHITECTURE.md, "Rebuilding a lost server"):
  kRebuildBeginRequest = 20,
  kRebuildBeginReply = 21,
  kRebuildReadRequest = 22,
  kRebuildReadReply = 23,
  kRebuildWriteRequest = 24,
  kRebuildWriteReply = 25,
  kRebuildFinishRequest = 26,
  kRebuildFinishReply = 27,
  kRebuildTerms = 28,  // server -> server, no reply
  // Client-state backup (docs/ARCHITECTURE.md, "Client-state backup").
  kBackupPutRequest = 30,
  kBackupPutReply = 31,
  kBackupListRequest = 32,
  kBackupListReply = 33,
  kBackupGetRequest = 34,
  kBackupGetReply = 35,
  // Performance accounting (s3oram bench).
  kStatsRequest = 40,
  kStatsReply = 41,
  // One round trip per access: the previous access's root write carried with
  // this access's retrieval (reply: kRetrieveReply).
  kRetrieveWriteRootRequest = 42,
  // Verifying a server's stored shares against their digests (s3oram scrub).
  kScrubRequest = 44,
  kScrubReply = 45,
  // Checking the three servers' sharings against each other (s3oram scrub,
  // and every eviction before it commits): public random digests of shares.
  kParityRequest = 46,
  kParityReply = 47,
  kEvictCheckRequest = 48,
  kEvictCheckReply = 49,
  // Opening share-MAC combinations of an eviction's committed inputs, to
  // tell a lying server from a value that was already wrong at rest.
  kMacOpenRequest = 50,
  kMacOpenReply = 51,
  // One slot's raw share, to name the server whose share of an inconsistent
  // slot is the odd one (s3oram scrub, rebuild's choice of target).
  kSlotShareRequest = 52,
  kSlotShareReply = 53,
  // Background eviction: EVICT_PREPARE's reply once the eviction is under
  // way (its input root is durable on the server), and the request whose
  // reply (kEvictPrepareReply) says it finished.
  kEvictStartedReply = 54,
  kEvictResultRequest = 55,
  // Benchmarks only: every bucket of a new, unused tree written with
  // sharings of empty slots, so that it costs what an aged tree costs.
  kAgeFillRequest = 56,
  kAgeFillReply = 57,
};
const char* MessageTypeName(MessageType t);

struct Header {
  MessageType type = MessageType::kError;
  FsId fs_id{};
  std::uint64_t epoch = 0;
  std::uint64_t seq = 0;
};

// Shape of a server's share of the tree.
struct StoreShape {
  std::uint32_t height = 0;         // H
  std::uint32_t bucket_size = 0;    // Z
  std::uint32_t elems_per_slot = 0; // m
  bool operator==(const StoreShape&) const = default;
};

struct ErrorReply {
  std::uint32_t code = 0;  // Status::Code
  std::string message;
};

struct StatusRequest {};
struct StatusReply {
  std::uint32_t server_index = 0;  // 0-based party index
  bool initialized = false;
  StoreShape shape;
  std::uint64_t epoch = 0;              // highest client epoch seen
  std::uint64_t applied_seq = 0;        // highest mutation seq applied
  std::uint64_t applied_evictions = 0;  // evictions committed (next eviction number)
  std::uint64_t prepared_eviction = 0;  // eviction number + 1 of a prepared, uncommitted shadow; 0 if none
  std::uint64_t share_file_bytes = 0;   // logical size of the share file
  std::uint64_t allocated_bytes = 0;    // bytes actually allocated on disk
  std::uint64_t peer_bytes_sent = 0;    // SMP bytes this process sent to peers since it started
  // A rebuild is under way (REBUILD_BEGIN without REBUILD_FINISH yet): the
  // store is not live (initialized is false) and normal requests are refused.
  // Caught up in place (a catch-up under way, or one cut off and not begun
  // again yet), applied_seq and applied_evictions are the state it is caught
  // up from; rebuilt in full, they are zero.
  bool rebuilding = false;
  // An EVICT_PREPARE under way on this server (the server answers STATUS
  // while it computes): which eviction and attempt, the round (1..rounds,
  // one per path level) and its phase, an estimate of the share done, and
  // how long it has run. All zero when evicting is false.
  bool evicting = false;
  std::uint64_t evicting_eviction = 0;
  std::uint32_t evicting_attempt = 0;
  std::uint32_t evicting_round = 0;
  std::uint32_t evicting_rounds = 0;
  std::uint32_t evicting_phase = 0;     // EvictPhase
  std::uint32_t evicting_permille = 0;  // 0..1000, by rounds and phases (an estimate)
  std::uint64_t evicting_elapsed_ms = 0;
};

// Where an EVICT_PREPARE is (StatusReply::evicting_phase).
enum class EvictPhase : std::uint32_t {
  kReading = 0,   // reading and checking the round's buckets, copying the sibling
  kKernels = 1,   // the matrix products
  kSmp = 2,       // re-sharing the products and sending them to the peers
  kPeerWait = 3,  // waiting for the peers' shares of the round
  kShadow = 4,    // combining them and writing the new buckets aside
  kSeal = 5,      // making the prepared buckets durable
};
// "kernels", "smp", ...; "unknown" for a value outside the enum.
const char* EvictPhaseName(std::uint32_t phase);

struct InitRequest {
  std::uint32_t server_index = 0;
  StoreShape shape;
  bool overwrite = false;  // replace an existing store of another filesystem
};
struct InitReply {};

// A server's share of a secret vector sent as the seed it is drawn from: a
// degree-1 sharing may have one pseudorandom share (shamir::CreateThroughShare),
// so the client sends that server 32 bytes instead of `count` elements, and
// the server expands them (ElemsFromSeed, oramcore/math/seed_stream.h,
// nonce kShareSeedNonce) before anything else (wire/share_seeds.h). count 0:
// not seeded (the elements are in the message; the seed is all zero).
struct ShareSeed {
  std::array<std::uint8_t, 32> seed{};
  std::uint32_t count = 0;
  bool operator==(const ShareSeed&) const = default;
};

struct RetrieveRequest {
  std::uint64_t leaf = 0;
  std::vector<Elem> select;  // Z (H+1) shares of the select vector
  ShareSeed select_seed;     // or their seed (select then empty)
};
struct RetrieveReply {
  std::vector<Elem> answer;  // m degree-2t shares
};

struct WriteRootRequest {
  std::uint32_t slot = 0;
  std::vector<Elem> share;  // m shares
  ShareSeed share_seed;     // or their seed (share then empty)
};
struct WriteRootReply {};

struct EvictPrepareRequest {
  std::uint64_t eviction = 0;  // ne
  std::uint32_t attempt = 0;   // bumped by the client on every retry of the same eviction
  std::uint64_t leaf = 0;
  std::vector<Elem> matrices;  // (H+1) * 2Z * Z shares, steps in plan order
  ShareSeed matrices_seed;     // or their seed (matrices then empty)
  // The servers that compute this attempt (bit i: server i), at least
  // 2t + 1 of them and this one among them; 0: every server. The others
  // miss the eviction (the client excluded them).
  std::uint32_t participants = 0;
};
// The PREPARE's outcome, as the reply to EVICT_RESULT.
struct EvictPrepareReply {
  std::uint64_t eviction = 0;
};
// The reply to EVICT_PREPARE: the server copied the root it evicts (so root
// writes may go on) and computes the eviction in the background.
struct EvictStartedReply {
  std::uint64_t eviction = 0;
  std::uint32_t attempt = 0;
};
// Waits until attempt `attempt` of eviction `eviction` is prepared (sealed
// in the server's shadow, or already committed); answered with
// EvictPrepareReply, or the error that ended the attempt.
struct EvictResultRequest {
  std::uint64_t eviction = 0;
  std::uint32_t attempt = 0;
};

struct EvictCommitRequest {
  std::uint64_t eviction = 0;
};
struct EvictCommitReply {
  std::uint64_t applied_evictions = 0;
};

// SMP degree-reduction shares from one server to another for one round.
struct SmpShares {
  std::uint64_t eviction = 0;
  std::uint32_t attempt = 0;
  std::uint32_t round = 0;       // 0..H-1: one round per path level (the leaf round carries both leaves)
  std::uint32_t from_index = 0;  // sender's party index
  std::vector<Elem> shares;
};

// The single-writer lease (one per filesystem on each server). A client that
// opens the filesystem for writing acquires it with its new epoch (the
// header's); every RETRIEVE, WRITE_ROOT and EVICT_* must then carry exactly
// the holder's epoch. `holder` is opaque to servers: the client seals a
// description of itself (host, process, mount point) under the master key, so
// a second client with the passphrase can name the holder and servers learn
// nothing. Acquiring a lease that another epoch holds fails unless `force`.
struct LeaseAcquireRequest {
  bool force = false;
  std::string holder;  // sealed, <= kMaxString bytes
};
// Reply to ACQUIRE, RELEASE and QUERY: the lease as it is after the request.
struct LeaseReply {
  bool granted = false;            // ACQUIRE: this request's epoch holds the lease now
  std::uint64_t holder_epoch = 0;  // 0: nobody holds it
  std::string holder;              // the holder's sealed description
  std::uint64_t held_ms = 0;       // since the holder acquired it (server clock)
  std::uint64_t idle_ms = 0;       // since this server last heard from the holder
  // Highest epoch this server ever granted the lease to: a new client's epoch
  // must be above it. (STATUS's epoch is the last one that changed the tree.)
  std::uint64_t highest_epoch = 0;
};
// Gives the lease up if the header's epoch holds it (a clean unmount).
struct LeaseReleaseRequest {};
struct LeaseQueryRequest {};

// ---- Server rebuild. The client drives it, but never holds a share of the
// lost server K, nor any term of one: the survivors send their masked
// Lagrange terms to K over the peer channel (REBUILD_TERMS), K alone sums
// them. The client sees which buckets are holes and how far K got.

// To K: start rebuilding. K drops any store it has (a live one of any
// filesystem only with force) and creates an empty sparse one that is not live
// until REBUILD_FINISH; until then it refuses RETRIEVE, WRITE_ROOT and
// EVICT_*. The header's fs_id and epoch are the filesystem's; the counters are
// what the survivors agree on.
struct RebuildBeginRequest {
  std::uint32_t server_index = 0;  // K, must be the receiver's own index
  StoreShape shape;
  std::uint64_t applied_seq = 0;
  std::uint64_t applied_evictions = 0;
  bool force = false;  // replace a live store
  // Catch up instead (an excluded server that missed some evictions): K keeps
  // its live store of this filesystem and shape, with at most the counters'
  // evictions applied, and REBUILD_WRITE replaces only the buckets the client
  // names, in place; the others keep K's shares. Marked on disk until
  // REBUILD_FINISH, so a restart in between opens it marked (begun again by
  // the next catch-up BEGIN).
  bool catch_up = false;
};
struct RebuildBeginReply {};

// To a survivor j in `participants`: send K (REBUILD_TERMS, over the peer
// channel) the masked terms
//   c_j = L_j(x_K) * s_j + sum_{i in S, i != j} (+/-) PRG(seed_ij, bucket)
// of buckets [first_bucket, first_bucket + count), and answer with the hole
// map once they are queued. Without `dense`, buckets that are file holes
// (never written) are flagged and omitted.
using RebuildNonce = std::array<std::uint8_t, kRebuildNonceBytes>;
struct RebuildReadRequest {
  std::uint32_t target = 0;                 // K
  std::vector<std::uint32_t> participants;  // S: t + 1 distinct survivors, ascending
  RebuildNonce nonce{};                     // fresh per rebuild run (client CSPRNG)
  std::uint64_t first_bucket = 0;           // 1-based; 0 (count 1): the root snapshot (root.bin)
  std::uint32_t count = 0;
  bool dense = false;  // send every bucket, holes included
};
struct RebuildReadReply {
  std::uint64_t first_bucket = 0;   // echoes the request
  std::vector<std::uint8_t> holes;  // count flags: 1 = never written, omitted from the terms
};

// Survivor j to K: its masked terms of one range (above), bucket order, the
// buckets flagged in `holes` omitted. K takes it only from the peer whose
// CURVE key `from_index` names, and only for a REBUILD_WRITE of the same
// nonce, range and hole map.
struct RebuildTerms {
  std::uint32_t target = 0;  // K
  RebuildNonce nonce{};
  std::uint64_t first_bucket = 0;
  std::uint32_t from_index = 0;  // j
  std::vector<std::uint8_t> holes;
  std::vector<Elem> terms;  // (count - holes) * Z * m elements
};

// To K: sum the terms every participant sent for this range (waiting for
// them up to the peers' timeout) and write the buckets that are not holes.
// `holes` is common to all participants.
struct RebuildWriteRequest {
  std::uint64_t first_bucket = 0;           // 0 (one bucket): the root snapshot
  std::vector<std::uint8_t> holes;          // one flag per bucket of the range
  std::vector<std::uint32_t> participants;  // S, ascending, as in REBUILD_READ
  RebuildNonce nonce{};
};
struct RebuildWriteReply {
  std::uint64_t next_bucket = 0;  // first bucket not yet rebuilt
};

// To K: every bucket has been written; make the store durable and live with
// the counters of REBUILD_BEGIN (repeated as a check).
struct RebuildFinishRequest {
  std::uint64_t applied_seq = 0;
  std::uint64_t applied_evictions = 0;
};
struct RebuildFinishReply {};

// Client-state backup: one server's share of an encrypted, padded snapshot of
// the client state (see oramcore/protocol/state_backup.h). A generation is a whole
// backup; the server sees only field elements (a degree-t share of the
// packed blob) and their count. Offsets and counts are in elements.
// Largest chunk one BACKUP_PUT or BACKUP_GET carries (4 MiB of elements).
inline constexpr std::uint32_t kMaxBackupChunkElems = 1u << 20;
// Largest backup a server stores (1 GiB of elements per generation).
inline constexpr std::uint64_t kMaxBackupElems = std::uint64_t{1} << 28;
// Most generations a BACKUP_LIST reply may name (a server keeps two).
inline constexpr std::uint32_t kMaxBackupGenerations = 16;

// Appends shares[0..n) at `offset` of generation `generation` (whose whole
// share has `total` elements). Chunks arrive in order from offset 0; `last`
// marks the chunk that ends at `total`, after which the generation is
// complete and durable. A chunk at offset 0 starts the upload afresh.
// `key_epoch` counts the passphrase changes behind the backup's key wrap
// (the state header's generation): once a generation of key epoch k is
// complete, the server deletes every generation of a lower key epoch, and it
// refuses uploads below the newest complete generation's key epoch. So after
// `s3oram passwd` no backup on the servers opens with the old passphrase.
struct BackupPutRequest {
  std::uint64_t generation = 0;
  std::uint64_t offset = 0;
  std::uint64_t total = 0;
  bool last = false;
  std::vector<Elem> shares;
  std::uint64_t key_epoch = 0;
};
struct BackupPutReply {
  std::uint64_t generation = 0;
  std::uint64_t received = 0;  // elements of the upload stored so far
};
struct BackupListRequest {};
struct BackupInfo {
  std::uint64_t generation = 0;
  std::uint64_t elems = 0;  // complete share size
  std::uint64_t key_epoch = 0;
  bool operator==(const BackupInfo&) const = default;
};
struct BackupListReply {
  std::vector<BackupInfo> backups;  // complete generations only, ascending
};
struct BackupGetRequest {
  std::uint64_t generation = 0;
  std::uint64_t offset = 0;
  std::uint32_t count = 0;  // at most kMaxBackupChunkElems
};
struct BackupGetReply {
  std::uint64_t generation = 0;
  std::uint64_t total = 0;  // the generation's whole share size
  std::vector<Elem> shares;
};

// What a server has spent its time on since the process started, for
// performance accounting: `s3oram bench` divides the difference of two
// replies by the accesses between them. Counts are requests handled; times
// are microseconds of wall clock inside the server (so network time is what a
// client waits beyond them). Like STATUS, STATS is answered to any
// authenticated client and changes nothing.
struct StatsRequest {};
struct StatsReply {
  std::uint64_t requests = 0;            // every frame handled, any type
  std::uint64_t busy_us = 0;             // decode + handle + encode, all frames
  std::uint64_t retrieves = 0;
  std::uint64_t retrieve_read_us = 0;    // fetching the path's buckets (page cache or disk)
  std::uint64_t retrieve_kernel_us = 0;  // the path inner product
  std::uint64_t root_writes = 0;
  std::uint64_t root_write_us = 0;       // slot write and its fdatasyncs
  std::uint64_t prepares = 0;
  std::uint64_t prepare_kernel_us = 0;   // eviction matrix products
  std::uint64_t prepare_smp_us = 0;      // SMP split, send, combine
  std::uint64_t prepare_peer_wait_us = 0;
  std::uint64_t prepare_shadow_us = 0;   // shadow bucket writes
  std::uint64_t prepare_seal_us = 0;     // shadow fdatasyncs
  std::uint64_t commits = 0;
  std::uint64_t commit_us = 0;           // making a sealed shadow live
};

// The root write of the previous access and the retrieval of this one, in one
// request: the server writes `share` to root slot `slot` (as WRITE_ROOT), then
// answers the retrieval (as RETRIEVE) over the tree that includes it, and
// replies only once the slot is durable. Both parts are validated before
// either is applied. A duplicate writes the same share again and recomputes.
struct RetrieveWriteRootRequest {
  std::uint32_t slot = 0;
  std::vector<Elem> share;   // m shares
  std::uint64_t leaf = 0;
  std::vector<Elem> select;  // Z (H+1) shares of the select vector
  ShareSeed share_seed;      // or the seed of `share`
  ShareSeed select_seed;     // or the seed of `select`
};

// Verify buckets [first_bucket, first_bucket + count) of the server's share
// file against their slot digests (serverd/share_store.h). Like STATUS it is
// answered to any authenticated client of the server's filesystem (fs_id must
// match), lease or not, and changes nothing; it reveals nothing a server does
// not know already (it reads every bucket of the range, whatever the client
// wants). A server bounds the bytes one request may read (kMaxScrubBytes).
// Bucket 0 (with count 1) names the root snapshot (root.bin: the root the
// next eviction reads, copied at its PREPARE) while that eviction is not
// committed; a server holding no such snapshot answers with no flags (and,
// for PARITY, no digests), so every byte an eviction reads is in the checks.
inline constexpr std::uint64_t kRootSnapshotBucket = 0;
struct ScrubRequest {
  std::uint64_t first_bucket = 0;  // 1-based, or kRootSnapshotBucket
  std::uint32_t count = 0;
};
struct ScrubReply {
  std::uint64_t first_bucket = 0;      // echoes the request
  std::vector<std::uint8_t> damaged;   // count * Z flags, bucket-major: 1 = slot damaged
};
// The most share data one SCRUB may make a server read.
inline constexpr std::uint64_t kMaxScrubBytes = std::uint64_t{256} << 20;

// Cross-server consistency (docs/ARCHITECTURE.md §9, "Consistency across
// servers"). The client draws a fresh 32-byte seed; every server expands it
// into the same public digest key (oramcore/math/slot_digest.h, a 2 x m
// matrix of field elements) and returns, for each slot, the public digest of
// its share of that slot. Digests are linear, so for the code's parity-check
// coefficients c_i, sum_i c_i * digest_i = digest(sum_i c_i * share_i), which
// is zero when the shares lie on one polynomial of degree t and nonzero with
// probability 1 - p^-2 per inconsistent slot. A server learns nothing: it
// sees only a random public key and its own shares; the client learns
// digests of its own data. The seed is drawn only after the shares exist, so
// a faulty server cannot have aimed its error at the key's kernel; a
// malicious one can still answer about other shares than it keeps (see
// docs/SECURITY.md).
inline constexpr std::size_t kParitySeedBytes = 32;
using ParitySeed = std::array<std::uint8_t, kParitySeedBytes>;
inline constexpr std::size_t kParityElemsPerSlot = 2;  // digest::kDigestElems
// PARITY: SCRUB's check plus the public digests, over the same range limit.
struct ParityRequest {
  std::uint64_t first_bucket = 0;  // 1-based, or kRootSnapshotBucket (as SCRUB)
  std::uint32_t count = 0;
  ParitySeed seed{};
};
struct ParityReply {
  std::uint64_t first_bucket = 0;     // echoes the request
  std::vector<std::uint8_t> damaged;  // count * Z flags, as in ScrubReply
  std::vector<Elem> digests;          // count * Z * 2, bucket-major (zeros for a hole)
};
// EVICT_CHECK: the public digests of a prepared (sealed, uncommitted)
// eviction's shadow buckets, in the order of the eviction's bucket list,
struct EvictCheckRequest {
  std::uint64_t eviction = 0;
  std::uint32_t attempt = 0;
  ParitySeed seed{};
};
// and kEvictCheckCombinations random linear combinations of all those slots
// (digest::CombinationWeights of the seed), each m elements: the client opens
// them and verifies their share MAC (math/share_mac.h).
inline constexpr std::size_t kEvictCheckCombinations = 2;
struct EvictCheckReply {
  std::uint64_t eviction = 0;
  std::vector<Elem> digests;      // buckets * Z * 2
  std::vector<Elem> combination;  // kEvictCheckCombinations * m, row-major
};
// MAC_OPEN: the same kEvictCheckCombinations combinations, over the
// committed (live) buckets an eviction reads: u_0..u_H on its path, then the
// sibling leaf s_H (tree/planner.h), each slot checked against its digest.
struct MacOpenRequest {
  std::uint64_t eviction = 0;
  ParitySeed seed{};
};
struct MacOpenReply {
  std::uint64_t eviction = 0;
  std::vector<Elem> combination;  // kEvictCheckCombinations * m, row-major
};
// SLOT_SHARE: the server's share of one committed slot, checked against its
// digest. One share reveals nothing of the value (t >= 1); any authorized
// client key can already read every server's shares (docs/SECURITY.md).
struct SlotShareRequest {
  std::uint64_t bucket = 0;  // 1-based, or kRootSnapshotBucket (NotFound without one)
  std::uint32_t slot = 0;
};
struct SlotShareReply {
  std::uint64_t bucket = 0;
  std::uint32_t slot = 0;
  std::vector<Elem> share;  // m elements
};

// AGE_FILL (benchmarks only; `s3oram age-fill`): a new tree is mostly sparse
// holes, which a retrieval skips and an eviction reads for free, so a young
// filesystem is much cheaper than one in use for months, whose every bucket
// an eviction has written. The server writes every slot of buckets
// [first_bucket, first_bucket + count) with its share a_1 x_i + ... + a_t x_i^t
// of a sharing of zero, the coefficients expanded from `seed` and the bucket
// number (the same on every server): consistent sharings of empty slots with
// zero share-MAC tags, which every check accepts, but no hole. Lease holder
// only; refused unless the server's tree has never been used (no access, no
// eviction applied), since it overwrites whatever the buckets hold. Same
// range limit as SCRUB (kMaxScrubBytes, or one bucket).
struct AgeFillRequest {
  std::uint64_t first_bucket = 0;  // 1-based
  std::uint32_t count = 0;
  ParitySeed seed{};
};
struct AgeFillReply {
  std::uint64_t first_bucket = 0;  // echoes the request
};

// Alternatives in ascending MessageType order (checked in wire.cpp).
using Body = std::variant<
    ErrorReply, StatusRequest, StatusReply, InitRequest, InitReply, RetrieveRequest, RetrieveReply,
    WriteRootRequest, WriteRootReply, EvictPrepareRequest, EvictPrepareReply, EvictCommitRequest,
    EvictCommitReply, SmpShares, LeaseAcquireRequest, LeaseReply, LeaseReleaseRequest,
    LeaseQueryRequest, RebuildBeginRequest, RebuildBeginReply, RebuildReadRequest, RebuildReadReply,
    RebuildWriteRequest, RebuildWriteReply, RebuildFinishRequest, RebuildFinishReply, RebuildTerms,
    BackupPutRequest, BackupPutReply, BackupListRequest, BackupListReply, BackupGetRequest,
    BackupGetReply, StatsRequest, StatsReply, RetrieveWriteRootRequest, ScrubRequest, ScrubReply,
    ParityRequest, ParityReply, EvictCheckRequest, EvictCheckReply, MacOpenRequest, MacOpenReply,
    SlotShareRequest, SlotShareReply, EvictStartedReply, EvictResultRequest, AgeFillRequest,
    AgeFillReply>;

struct Message {
  Header header;
  Body body;
};

// The type tag that goes with a body alternative.
MessageType TypeOf(const Body& body);

// Encodes header + body; header.type is taken from the body.
std::vector<std::uint8_t> Encode(const Header& header, const Body& body);
// Decodes one whole frame. Never reads out of bounds, never allocates more than
// the frame's own size, rejects every malformed input with Status::Corruption.
Result<Message> Decode(std::span<const std::uint8_t> frame);

// SMP_SHARES on an eviction's hot path (hundreds of MB per round and peer):
// the same bytes Encode and Decode produce and accept, without a copy of the
// shares into a Body and reusing the caller's buffers, so that the rounds of
// one eviction do not map fresh pages for every frame.
// EncodeSmpShares replaces `frame` with the encoded message (its capacity is
// kept); `m.shares` is ignored and `shares` encoded in its place.
void EncodeSmpShares(const Header& header, const SmpShares& m, std::span<const Elem> shares,
                     std::vector<std::uint8_t>& frame);
// The same frame written in two steps, for a sender that produces the shares
// chunk by chunk: StartSmpSharesFrame sizes `frame` for `count` shares, writes
// everything before them and returns the offset of the packed shares; the
// caller then packs shares [s, s + c) at offset + PackedElemBytes(s) with
// PackElems, every s a multiple of 8 (eight 31-bit shares are 31 whole bytes),
// until all `count` are written. `m.shares` is ignored.
std::size_t StartSmpSharesFrame(const Header& header, const SmpShares& m, std::size_t count,
                                std::vector<std::uint8_t>& frame);
// Decodes a frame that must be SMP_SHARES into *header and *out, reusing the
// capacity of out->shares; every check Decode makes is made. On failure *out
// is unspecified (its vector still owns its memory).
Status DecodeSmpSharesInto(std::span<const std::uint8_t> frame, Header* header, SmpShares* out);

// The type of a frame whose magic, version and header length are right,
// without decoding it (a server decides from it where a request runs);
// nullopt otherwise. Decode still checks everything.
std::optional<MessageType> PeekType(std::span<const std::uint8_t> frame);

// Builds an ErrorReply message body from a Status.
ErrorReply ErrorFromStatus(const Status& s);
Status StatusFromError(const ErrorReply& e);

}  // namespace s3oram::wire

// The wire codec. Every body layout is written exactly once, as a `Fields`
// function that walks a message's fields in wire order through an "I/O"
// object (oramcore/wire/codec_io.h): Sizer counts the bytes, Writer appends
// them, Reader parses them back with bounds, range and canonicality checks.
// Because encoder and decoder share the same field walk, the two can never
// disagree about a layout.
#include "oramcore/wire/wire.h"

#include <array>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>

#include "oramcore/math/elem_packing.h"
#include "oramcore/wire/codec_io.h"

namespace s3oram::wire {
namespace {

using namespace codec_io;

// ---------------------------------------------------------------------------
// Body layouts, one per message, shared by Sizer, Writer and Reader. `Ref`
// makes the message const when writing and mutable when reading.

template <class Io, class T>
using Ref = std::conditional_t<Io::kWriting, const T&, T&>;

template <class Io>
void Fields(Io& io, Ref<Io, StoreShape> m) {
  io.U32(m.height, "shape.height");
  io.U32(m.bucket_size, "shape.bucket_size");
  io.U32(m.elems_per_slot, "shape.elems_per_slot");
}
template <class Io>
void Fields(Io& io, Ref<Io, ErrorReply> m) {
  io.U32(m.code, "code");
  io.String(m.message, "message");
}
template <class Io>
void Fields(Io&, Ref<Io, StatusRequest>) {}
template <class Io>
void Fields(Io& io, Ref<Io, StatusReply> m) {
  io.U32(m.server_index, "server_index");
  io.Bool(m.initialized, "initialized");
  Fields<Io>(io, m.shape);
  io.U64(m.epoch, "epoch");
  io.U64(m.applied_seq, "applied_seq");
  io.U64(m.applied_evictions, "applied_evictions");
  io.U64(m.prepared_eviction, "prepared_eviction");
  io.U64(m.share_file_bytes, "share_file_bytes");
  io.U64(m.allocated_bytes, "allocated_bytes");
  io.U64(m.peer_bytes_sent, "peer_bytes_sent");
  io.Bool(m.rebuilding, "rebuilding");
  io.Bool(m.evicting, "evicting");
  io.U64(m.evicting_eviction, "evicting_eviction");
  io.U32(m.evicting_attempt, "evicting_attempt");
  io.U32(m.evicting_round, "evicting_round");
  io.U32(m.evicting_rounds, "evicting_rounds");
  io.U32(m.evicting_phase, "evicting_phase");
  io.U32(m.evicting_permille, "evicting_permille");
  io.U64(m.evicting_elapsed_ms, "evicting_elapsed_ms");
}
template <class Io>
void Fields(Io& io, Ref<Io, InitRequest> m) {
  io.U32(m.server_index, "server_index");
  Fields<Io>(io, m.shape);
  io.Bool(m.overwrite, "overwrite");
}
template <class Io>
void Fields(Io&, Ref<Io, InitReply>) {}
template <class Io>
void Fields(Io& io, Ref<Io, ShareSeed> m) {
  io.Fixed(m.seed, "share_seed.seed");
  io.U32(m.count, "share_seed.count");
}
template <class Io>
void Fields(Io& io, Ref<Io, RetrieveRequest> m) {
  io.U64(m.leaf, "leaf");
  io.Elems(m.select, "select");
  Fields<Io>(io, m.select_seed);
}
template <class Io>
void Fields(Io& io, Ref<Io, RetrieveReply> m) {
  io.Elems(m.answer, "answer");
}
template <class Io>
void Fields(Io& io, Ref<Io, WriteRootRequest> m) {
  io.U32(m.slot, "slot");
  io.Elems(m.share, "share");
  Fields<Io>(io, m.share_seed);
}
template <class Io>
void Fields(Io&, Ref<Io, WriteRootReply>) {}
template <class Io>
void Fields(Io& io, Ref<Io, EvictPrepareRequest> m) {
  io.U64(m.eviction, "eviction");
  io.U32(m.attempt, "attempt");
  io.U64(m.leaf, "leaf");
  io.Elems(m.matrices, "matrices");
  Fields<Io>(io, m.matrices_seed);
  io.U32(m.participants, "participants");
}
template <class Io>
void Fields(Io& io, Ref<Io, EvictPrepareReply> m) {
  io.U64(m.eviction, "eviction");
}
template <class Io>
void Fields(Io& io, Ref<Io, EvictStartedReply> m) {
  io.U64(m.eviction, "eviction");
  io.U32(m.attempt, "attempt");
}
template <class Io>
void Fields(Io& io, Ref<Io, EvictResultRequest> m) {
  io.U64(m.eviction, "eviction");
  io.U32(m.attempt, "attempt");
}
template <class Io>
void Fields(Io& io, Ref<Io, AgeFillRequest> m) {
  io.U64(m.first_bucket, "first_bucket");
  io.U32(m.count, "count");
  io.Fixed(m.seed, "seed");
}
template <class Io>
void Fields(Io& io, Ref<Io, AgeFillReply> m) {
  io.U64(m.first_bucket, "first_bucket");
}
template <class Io>
void Fields(Io& io, Ref<Io, EvictCommitRequest> m) {
  io.U64(m.eviction, "eviction");
}
template <class Io>
void Fields(Io& io, Ref<Io, EvictCommitReply> m) {
  io.U64(m.applied_evictions, "applied_evictions");
}
template <class Io>
void Fields(Io& io, Ref<Io, SmpShares> m) {
  io.U64(m.eviction, "eviction");
  io.U32(m.attempt, "attempt");
  io.U32(m.round, "round");
  io.U32(m.from_index, "from_index");
  io.Elems(m.shares, "shares");
}
template <class Io>
void Fields(Io& io, Ref<Io, LeaseAcquireRequest> m) {
  io.Bool(m.force, "force");
  io.String(m.holder, "holder");
}
template <class Io>
void Fields(Io& io, Ref<Io, LeaseReply> m) {
  io.Bool(m.granted, "granted");
  io.U64(m.holder_epoch, "holder_epoch");
  io.String(m.holder, "holder");
  io.U64(m.held_ms, "held_ms");
  io.U64(m.idle_ms, "idle_ms");
  io.U64(m.highest_epoch, "highest_epoch");
}
template <class Io>
void Fields(Io&, Ref<Io, LeaseReleaseRequest>) {}
template <class Io>
void Fields(Io&, Ref<Io, LeaseQueryRequest>) {}

template <class Io>
void Fields(Io& io, Ref<Io, RebuildBeginRequest> m) {
  io.U32(m.server_index, "server_index");
  Fields<Io>(io, m.shape);
  io.U64(m.applied_seq, "applied_seq");
  io.U64(m.applied_evictions, "applied_evictions");
  io.Bool(m.force, "force");
  io.Bool(m.catch_up, "catch_up");
}
template <class Io>
void Fields(Io&, Ref<Io, RebuildBeginReply>) {}
template <class Io>
void Fields(Io& io, Ref<Io, RebuildReadRequest> m) {
  io.U32(m.target, "target");
  io.Indices(m.participants, "participants");
  io.Fixed(m.nonce, "nonce");
  io.U64(m.first_bucket, "first_bucket");
  io.U32(m.count, "count");
  io.Bool(m.dense, "dense");
}
template <class Io>
void Fields(Io& io, Ref<Io, RebuildReadReply> m) {
  io.U64(m.first_bucket, "first_bucket");
  io.Flags(m.holes, "holes");
}
template <class Io>
void Fields(Io& io, Ref<Io, RebuildWriteRequest> m) {
  io.U64(m.first_bucket, "first_bucket");
  io.Flags(m.holes, "holes");
  io.Indices(m.participants, "participants");
  io.Fixed(m.nonce, "nonce");
}
template <class Io>
void Fields(Io& io, Ref<Io, RebuildWriteReply> m) {
  io.U64(m.next_bucket, "next_bucket");
}
template <class Io>
void Fields(Io& io, Ref<Io, RebuildFinishRequest> m) {
  io.U64(m.applied_seq, "applied_seq");
  io.U64(m.applied_evictions, "applied_evictions");
}
template <class Io>
void Fields(Io&, Ref<Io, RebuildFinishReply>) {}
template <class Io>
void Fields(Io& io, Ref<Io, RebuildTerms> m) {
  io.U32(m.target, "target");
  io.Fixed(m.nonce, "nonce");
  io.U64(m.first_bucket, "first_bucket");
  io.U32(m.from_index, "from_index");
  io.Flags(m.holes, "holes");
  io.Elems(m.terms, "terms");
}
template <class Io>
void Fields(Io& io, Ref<Io, BackupPutRequest> m) {
  io.U64(m.generation, "generation");
  io.U64(m.offset, "offset");
  io.U64(m.total, "total");
  io.Bool(m.last, "last");
  io.Elems(m.shares, "shares");
  io.U64(m.key_epoch, "key_epoch");
}
template <class Io>
void Fields(Io& io, Ref<Io, BackupPutReply> m) {
  io.U64(m.generation, "generation");
  io.U64(m.received, "received");
}
template <class Io>
void Fields(Io&, Ref<Io, BackupListRequest>) {}
template <class Io>
void Fields(Io& io, Ref<Io, BackupInfo> m) {
  io.U64(m.generation, "backup.generation");
  io.U64(m.elems, "backup.elems");
  io.U64(m.key_epoch, "backup.key_epoch");
}
// A u32 count (at most kMaxBackupGenerations) then that many BackupInfo. The
// reader checks the count against the cap and the bytes present before it
// allocates, like Elems.
template <class Io>
void Fields(Io& io, Ref<Io, BackupListReply> m) {
  constexpr std::size_t kInfoBytes = 24;
  if constexpr (Io::kWriting) {
    if (m.backups.size() > kMaxBackupGenerations) {
      std::fprintf(stderr, "s3oram::wire::Encode: %zu backups, above kMaxBackupGenerations (%u)\n",
                   m.backups.size(), kMaxBackupGenerations);
      std::abort();
    }
    const auto count = static_cast<std::uint32_t>(m.backups.size());
    io.U32(count, "backups.count");
    for (const BackupInfo& b : m.backups) Fields<Io>(io, b);
  } else {
    std::uint32_t count = 0;
    io.U32(count, "backups.count");
    if (!io.ok()) return;
    if (count > kMaxBackupGenerations) {
      io.Fail("backups: count " + std::to_string(count) + " exceeds limit " +
              std::to_string(kMaxBackupGenerations));
      return;
    }
    if (std::size_t{count} * kInfoBytes > io.remaining()) {
      io.Fail("backups: " + std::to_string(count) + " entries need " +
              std::to_string(std::size_t{count} * kInfoBytes) + " bytes, only " +
              std::to_string(io.remaining()) + " left (truncated)");
      return;
    }
    m.backups.resize(count);
    for (BackupInfo& b : m.backups) Fields<Io>(io, b);
  }
}
template <class Io>
void Fields(Io& io, Ref<Io, BackupGetRequest> m) {
  io.U64(m.generation, "generation");
  io.U64(m.offset, "offset");
  io.U32(m.count, "count");
}
template <class Io>
void Fields(Io& io, Ref<Io, BackupGetReply> m) {
  io.U64(m.generation, "generation");
  io.U64(m.total, "total");
  io.Elems(m.shares, "shares");
}
template <class Io>
void Fields(Io& io, Ref<Io, RetrieveWriteRootRequest> m) {
  io.U32(m.slot, "slot");
  io.Elems(m.share, "share");
  io.U64(m.leaf, "leaf");
  io.Elems(m.select, "select");
  Fields<Io>(io, m.share_seed);
  Fields<Io>(io, m.select_seed);
}
template <class Io>
void Fields(Io& io, Ref<Io, ScrubRequest> m) {
  io.U64(m.first_bucket, "first_bucket");
  io.U32(m.count, "count");
}
template <class Io>
void Fields(Io& io, Ref<Io, ScrubReply> m) {
  io.U64(m.first_bucket, "first_bucket");
  io.Flags(m.damaged, "damaged");
}
template <class Io>
void Fields(Io& io, Ref<Io, ParityRequest> m) {
  io.U64(m.first_bucket, "first_bucket");
  io.U32(m.count, "count");
  io.Fixed(m.seed, "seed");
}
template <class Io>
void Fields(Io& io, Ref<Io, ParityReply> m) {
  io.U64(m.first_bucket, "first_bucket");
  io.Flags(m.damaged, "damaged");
  io.Elems(m.digests, "digests");
}
template <class Io>
void Fields(Io& io, Ref<Io, EvictCheckRequest> m) {
  io.U64(m.eviction, "eviction");
  io.U32(m.attempt, "attempt");
  io.Fixed(m.seed, "seed");
}
template <class Io>
void Fields(Io& io, Ref<Io, EvictCheckReply> m) {
  io.U64(m.eviction, "eviction");
  io.Elems(m.digests, "digests");
  io.Elems(m.combination, "combination");
}
template <class Io>
void Fields(Io& io, Ref<Io, MacOpenRequest> m) {
  io.U64(m.eviction, "eviction");
  io.Fixed(m.seed, "seed");
}
template <class Io>
void Fields(Io& io, Ref<Io, MacOpenReply> m) {
  io.U64(m.eviction, "eviction");
  io.Elems(m.combination, "combination");
}
template <class Io>
void Fields(Io& io, Ref<Io, SlotShareRequest> m) {
  io.U64(m.bucket, "bucket");
  io.U32(m.slot, "slot");
}
template <class Io>
void Fields(Io& io, Ref<Io, SlotShareReply> m) {
  io.U64(m.bucket, "bucket");
  io.U32(m.slot, "slot");
  io.Elems(m.share, "share");
}
template <class Io>
void Fields(Io&, Ref<Io, StatsRequest>) {}
template <class Io>
void Fields(Io& io, Ref<Io, StatsReply> m) {
  io.U64(m.requests, "requests");
  io.U64(m.busy_us, "busy_us");
  io.U64(m.retrieves, "retrieves");
  io.U64(m.retrieve_read_us, "retrieve_read_us");
  io.U64(m.retrieve_kernel_us, "retrieve_kernel_us");
  io.U64(m.root_writes, "root_writes");
  io.U64(m.root_write_us, "root_write_us");
  io.U64(m.prepares, "prepares");
  io.U64(m.prepare_kernel_us, "prepare_kernel_us");
  io.U64(m.prepare_smp_us, "prepare_smp_us");
  io.U64(m.prepare_peer_wait_us, "prepare_peer_wait_us");
  io.U64(m.prepare_shadow_us, "prepare_shadow_us");
  io.U64(m.prepare_seal_us, "prepare_seal_us");
  io.U64(m.commits, "commits");
  io.U64(m.commit_us, "commit_us");
}

// Counts the members of an aggregate: the largest n for which T{x1, ..., xn}
// compiles with placeholders convertible to anything.
struct AnyField {
  template <class T>
  operator T() const;  // NOLINT(google-explicit-constructor): declared only, never called
};
template <class T, class... A>
constexpr std::size_t MemberCount() {
  if constexpr (requires { T{A{}..., AnyField{}}; }) {
    return MemberCount<T, A..., AnyField>();
  } else {
    return sizeof...(A);
  }
}

// The type tag of each body alternative, checked at compile time to cover the
// whole variant in strictly ascending order (numbers may have gaps: ranges are
// reserved per feature), and the number
// of members its Fields() above encodes: a member added to a message in
// wire.h without a matching Fields() line would otherwise be silently dropped
// on the wire, so it fails the build here instead.
template <class T>
struct Tag;
#define S3ORAM_WIRE_TAG(T, tag, members)                                          \
  template <>                                                                     \
  struct Tag<T> {                                                                 \
    static constexpr MessageType kType = MessageType::tag;                        \
  };                                                                              \
  static_assert(MemberCount<T>() == (members),                                    \
                #T " changed: update its Fields() layout in wire.cpp (and the " \
                "member count here)")
S3ORAM_WIRE_TAG(ErrorReply, kError, 2);
S3ORAM_WIRE_TAG(StatusRequest, kStatusRequest, 0);
S3ORAM_WIRE_TAG(StatusReply, kStatusReply, 19);
S3ORAM_WIRE_TAG(InitRequest, kInitRequest, 3);
S3ORAM_WIRE_TAG(InitReply, kInitReply, 0);
S3ORAM_WIRE_TAG(RetrieveRequest, kRetrieveRequest, 3);
S3ORAM_WIRE_TAG(RetrieveReply, kRetrieveReply, 1);
S3ORAM_WIRE_TAG(WriteRootRequest, kWriteRootRequest, 3);
S3ORAM_WIRE_TAG(WriteRootReply, kWriteRootReply, 0);
S3ORAM_WIRE_TAG(EvictPrepareRequest, kEvictPrepareRequest, 6);
S3ORAM_WIRE_TAG(EvictPrepareReply, kEvictPrepareReply, 1);
S3ORAM_WIRE_TAG(EvictCommitRequest, kEvictCommitRequest, 1);
S3ORAM_WIRE_TAG(EvictCommitReply, kEvictCommitReply, 1);
S3ORAM_WIRE_TAG(SmpShares, kSmpShares, 5);
S3ORAM_WIRE_TAG(LeaseAcquireRequest, kLeaseAcquireRequest, 2);
S3ORAM_WIRE_TAG(LeaseReply, kLeaseReply, 6);
S3ORAM_WIRE_TAG(LeaseReleaseRequest, kLeaseReleaseRequest, 0);
S3ORAM_WIRE_TAG(LeaseQueryRequest, kLeaseQueryRequest, 0);
S3ORAM_WIRE_TAG(RebuildBeginRequest, kRebuildBeginRequest, 6);
S3ORAM_WIRE_TAG(RebuildBeginReply, kRebuildBeginReply, 0);
S3ORAM_WIRE_TAG(RebuildReadRequest, kRebuildReadRequest, 6);
S3ORAM_WIRE_TAG(RebuildReadReply, kRebuildReadReply, 2);
S3ORAM_WIRE_TAG(RebuildWriteRequest, kRebuildWriteRequest, 4);
S3ORAM_WIRE_TAG(RebuildWriteReply, kRebuildWriteReply, 1);
S3ORAM_WIRE_TAG(RebuildFinishRequest, kRebuildFinishRequest, 2);
S3ORAM_WIRE_TAG(RebuildFinishReply, kRebuildFinishReply, 0);
S3ORAM_WIRE_TAG(RebuildTerms, kRebuildTerms, 6);
S3ORAM_WIRE_TAG(BackupPutRequest, kBackupPutRequest, 6);
S3ORAM_WIRE_TAG(BackupPutReply, kBackupPutReply, 2);
S3ORAM_WIRE_TAG(BackupListRequest, kBackupListRequest, 0);
S3ORAM_WIRE_TAG(BackupListReply, kBackupListReply, 1);
S3ORAM_WIRE_TAG(BackupGetRequest, kBackupGetRequest, 3);
S3ORAM_WIRE_TAG(BackupGetReply, kBackupGetReply, 3);
S3ORAM_WIRE_TAG(StatsRequest, kStatsRequest, 0);
S3ORAM_WIRE_TAG(StatsReply, kStatsReply, 15);
S3ORAM_WIRE_TAG(RetrieveWriteRootRequest, kRetrieveWriteRootRequest, 6);
S3ORAM_WIRE_TAG(ScrubRequest, kScrubRequest, 2);
S3ORAM_WIRE_TAG(ScrubReply, kScrubReply, 2);
S3ORAM_WIRE_TAG(ParityRequest, kParityRequest, 3);
S3ORAM_WIRE_TAG(ParityReply, kParityReply, 3);
S3ORAM_WIRE_TAG(EvictCheckRequest, kEvictCheckRequest, 3);
S3ORAM_WIRE_TAG(EvictCheckReply, kEvictCheckReply, 3);
S3ORAM_WIRE_TAG(MacOpenRequest, kMacOpenRequest, 2);
S3ORAM_WIRE_TAG(MacOpenReply, kMacOpenReply, 2);
S3ORAM_WIRE_TAG(SlotShareRequest, kSlotShareRequest, 2);
S3ORAM_WIRE_TAG(SlotShareReply, kSlotShareReply, 3);
S3ORAM_WIRE_TAG(EvictStartedReply, kEvictStartedReply, 2);
S3ORAM_WIRE_TAG(EvictResultRequest, kEvictResultRequest, 2);
S3ORAM_WIRE_TAG(AgeFillRequest, kAgeFillRequest, 3);
S3ORAM_WIRE_TAG(AgeFillReply, kAgeFillReply, 1);
static_assert(MemberCount<StoreShape>() == 3, "StoreShape changed: update its Fields() layout");
static_assert(MemberCount<BackupInfo>() == 3, "BackupInfo changed: update its Fields() layout");
#undef S3ORAM_WIRE_TAG

constexpr std::size_t kTypes = std::variant_size_v<Body>;
// kTypeOf[i]: the MessageType number of variant alternative i.
template <std::size_t... I>
constexpr std::array<std::uint16_t, sizeof...(I)> TypeTable(std::index_sequence<I...>) {
  return {static_cast<std::uint16_t>(Tag<std::variant_alternative_t<I, Body>>::kType)...};
}
constexpr std::array<std::uint16_t, kTypes> kTypeOf = TypeTable(std::make_index_sequence<kTypes>());
constexpr bool StrictlyAscending(const std::array<std::uint16_t, kTypes>& t) {
  if (t[0] == 0) return false;  // 0 is never a type
  for (std::size_t i = 1; i < t.size(); ++i) {
    if (t[i] <= t[i - 1]) return false;
  }
  return true;
}
static_assert(StrictlyAscending(kTypeOf),
              "Body alternatives must be in strictly ascending MessageType order");

// Variant index of a type number, or kTypes if no message has it.
std::size_t IndexOfType(std::uint16_t type) {
  for (std::size_t i = 0; i < kTypes; ++i) {
    if (kTypeOf[i] == type) return i;
  }
  return kTypes;
}

// Decodes the body of alternative I (= type - 1) into a Body.
template <std::size_t I>
Result<Body> DecodeBodyAs(std::span<const std::uint8_t> body) {
  using T = std::variant_alternative_t<I, Body>;
  Reader r(body, MessageTypeName(Tag<T>::kType));
  T m{};
  Fields<Reader>(r, m);
  if (r.ok() && r.remaining() != 0) {
    r.Fail(std::to_string(r.remaining()) + " trailing bytes after the body's last field");
  }
  if (!r.ok()) return r.status();
  return Body(std::in_place_index<I>, std::move(m));
}

template <std::size_t... I>
Result<Body> DecodeBody(std::size_t index, std::span<const std::uint8_t> body,
                        std::index_sequence<I...>) {
  using Fn = Result<Body> (*)(std::span<const std::uint8_t>);
  static constexpr Fn kTable[] = {&DecodeBodyAs<I>...};
  return kTable[index](body);
}

}  // namespace

const char* EvictPhaseName(std::uint32_t phase) {
  switch (static_cast<EvictPhase>(phase)) {
    case EvictPhase::kReading: return "reading";
    case EvictPhase::kKernels: return "kernels";
    case EvictPhase::kSmp: return "smp";
    case EvictPhase::kPeerWait: return "peer wait";
    case EvictPhase::kShadow: return "shadow";
    case EvictPhase::kSeal: return "seal";
  }
  return "unknown";
}

const char* MessageTypeName(MessageType t) {
  switch (t) {
    case MessageType::kError: return "ERROR";
    case MessageType::kStatusRequest: return "STATUS_REQUEST";
    case MessageType::kStatusReply: return "STATUS_REPLY";
    case MessageType::kInitRequest: return "INIT_REQUEST";
    case MessageType::kInitReply: return "INIT_REPLY";
    case MessageType::kRetrieveRequest: return "RETRIEVE_REQUEST";
    case MessageType::kRetrieveReply: return "RETRIEVE_REPLY";
    case MessageType::kWriteRootRequest: return "WRITE_ROOT_REQUEST";
    case MessageType::kWriteRootReply: return "WRITE_ROOT_REPLY";
    case MessageType::kEvictPrepareRequest: return "EVICT_PREPARE_REQUEST";
    case MessageType::kEvictPrepareReply: return "EVICT_PREPARE_REPLY";
    case MessageType::kEvictCommitRequest: return "EVICT_COMMIT_REQUEST";
    case MessageType::kEvictCommitReply: return "EVICT_COMMIT_REPLY";
    case MessageType::kSmpShares: return "SMP_SHARES";
    case MessageType::kLeaseAcquireRequest: return "LEASE_ACQUIRE_REQUEST";
    case MessageType::kLeaseReply: return "LEASE_REPLY";
    case MessageType::kLeaseReleaseRequest: return "LEASE_RELEASE_REQUEST";
    case MessageType::kLeaseQueryRequest: return "LEASE_QUERY_REQUEST";
    case MessageType::kRebuildBeginRequest: return "REBUILD_BEGIN_REQUEST";
    case MessageType::kRebuildBeginReply: return "REBUILD_BEGIN_REPLY";
    case MessageType::kRebuildReadRequest: return "REBUILD_READ_REQUEST";
    case MessageType::kRebuildReadReply: return "REBUILD_READ_REPLY";
    case MessageType::kRebuildWriteRequest: return "REBUILD_WRITE_REQUEST";
    case MessageType::kRebuildWriteReply: return "REBUILD_WRITE_REPLY";
    case MessageType::kRebuildFinishRequest: return "REBUILD_FINISH_REQUEST";
    case MessageType::kRebuildFinishReply: return "REBUILD_FINISH_REPLY";
    case MessageType::kRebuildTerms:
      return "REBUILD_TERMS";
    case MessageType::kBackupPutRequest: return "BACKUP_PUT_REQUEST";
    case MessageType::kBackupPutReply: return "BACKUP_PUT_REPLY";
    case MessageType::kBackupListRequest: return "BACKUP_LIST_REQUEST";
    case MessageType::kBackupListReply: return "BACKUP_LIST_REPLY";
    case MessageType::kBackupGetRequest: return "BACKUP_GET_REQUEST";
    case MessageType::kBackupGetReply: return "BACKUP_GET_REPLY";
    case MessageType::kStatsRequest: return "STATS_REQUEST";
    case MessageType::kStatsReply: return "STATS_REPLY";
    case MessageType::kRetrieveWriteRootRequest: return "RETRIEVE_WRITE_ROOT_REQUEST";
    case MessageType::kScrubRequest: return "SCRUB_REQUEST";
    case MessageType::kScrubReply: return "SCRUB_REPLY";
    case MessageType::kParityRequest: return "PARITY_REQUEST";
    case MessageType::kParityReply: return "PARITY_REPLY";
    case MessageType::kEvictCheckRequest: return "EVICT_CHECK_REQUEST";
    case MessageType::kEvictCheckReply: return "EVICT_CHECK_REPLY";
    case MessageType::kMacOpenRequest: return "MAC_OPEN_REQUEST";
    case MessageType::kMacOpenReply: return "MAC_OPEN_REPLY";
    case MessageType::kSlotShareRequest: return "SLOT_SHARE_REQUEST";
    case MessageType::kSlotShareReply: return "SLOT_SHARE_REPLY";
    case MessageType::kEvictStartedReply: return "EVICT_STARTED_REPLY";
    case MessageType::kEvictResultRequest: return "EVICT_RESULT_REQUEST";
    case MessageType::kAgeFillRequest: return "AGE_FILL_REQUEST";
    case MessageType::kAgeFillReply: return "AGE_FILL_REPLY";
  }
  return "UNKNOWN";
}

MessageType TypeOf(const Body& body) {
  return std::visit([](const auto& b) { return Tag<std::decay_t<decltype(b)>>::kType; }, body);
}

namespace {

// Writes the fixed header of a frame whose body is `body_bytes` long.
void WriteHeader(Writer& w, std::vector<std::uint8_t>& out, const Header& header, MessageType type,
                 std::size_t body_bytes) {
  w.U32(kMagic, "magic");
  w.U16(kWireVersion, "version");
  w.U16(static_cast<std::uint16_t>(type), "type");
  const auto* fs = header.fs_id.data();
  out.insert(out.end(), fs, fs + header.fs_id.size());
  w.U64(header.epoch, "epoch");
  w.U64(header.seq, "seq");
  w.U32(static_cast<std::uint32_t>(body_bytes), "length");
}

// Reads and checks the fixed header; returns the body alternative's index.
// On success the reader stands at the body, whose length matches the header.
Result<std::size_t> ReadHeader(Reader& r, Header* header) {
  // Magic and version are checked before anything else so that a frame from a
  // different protocol version, whose header may be laid out differently, gets
  // a version error rather than a misleading length or type error.
  std::uint32_t magic = 0;
  r.U32(magic, "magic");
  if (!r.ok()) return r.status();
  if (magic != kMagic) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "wire frame: bad magic 0x%08x (expected 0x%08x 'S3OR')",
                  magic, kMagic);
    return Status::Corruption(buf);
  }
  std::uint16_t version = 0;
  r.U16(version, "version");
  if (!r.ok()) return r.status();
  if (version != kWireVersion) {
    return Status::Corruption("wire frame: protocol version mismatch: peer sent version " +
                              std::to_string(version) + ", this build speaks version " +
                              std::to_string(kWireVersion));
  }
  std::uint16_t raw_type = 0;
  r.U16(raw_type, "type");
  if (!r.ok()) return r.status();
  const std::size_t index = IndexOfType(raw_type);
  if (index == kTypes) {
    return Status::Corruption("wire frame: unknown message type " + std::to_string(raw_type));
  }

  header->type = static_cast<MessageType>(raw_type);
  r.Bytes(header->fs_id.data(), header->fs_id.size(), "fs_id");
  r.U64(header->epoch, "epoch");
  r.U64(header->seq, "seq");
  std::uint32_t length = 0;
  r.U32(length, "length");
  if (!r.ok()) return r.status();
  if (length != r.remaining()) {
    return Status::Corruption(std::string("wire frame: ") + MessageTypeName(header->type) +
                              " header declares a " + std::to_string(length) + "-byte body but " +
                              std::to_string(r.remaining()) + " bytes follow the header");
  }
  return index;
}

}  // namespace

std::vector<std::uint8_t> Encode(const Header& header, const Body& body) {
  return std::visit(
      [&header](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        Sizer sizer;
        Fields<Sizer>(sizer, b);
        const std::size_t body_bytes = sizer.size();
        // A list of vectors can exceed what one vector's cap keeps in range;
        // a body the u32 length cannot describe is a bug in the caller.
        if (body_bytes > std::numeric_limits<std::uint32_t>::max()) {
          EncodeContractViolation("message body (bytes)", body_bytes);
        }

        std::vector<std::uint8_t> out;
        out.reserve(kHeaderBytes + body_bytes);
        Writer w(out);
        // The header's type always comes from the body, so a frame cannot
        // claim one type and carry another's layout.
        WriteHeader(w, out, header, Tag<T>::kType, body_bytes);
        Fields<Writer>(w, b);
        // Sizer and Writer walk the same Fields, so this only fails if one of
        // their per-field byte counts is wrong: a bug in this file.
        if (out.size() != kHeaderBytes + body_bytes) {
          std::fprintf(stderr, "s3oram::wire::Encode: size mismatch for %s (%zu != %zu)\n",
                       MessageTypeName(Tag<T>::kType), out.size(), kHeaderBytes + body_bytes);
          std::abort();
        }
        return out;
      },
      body);
}

std::size_t StartSmpSharesFrame(const Header& header, const SmpShares& m, std::size_t count,
                                std::vector<std::uint8_t>& frame) {
  if (count > kMaxElems) EncodeContractViolation("shares", count);
  constexpr std::size_t kFixedBody = 8 + 4 + 4 + 4 + 4;
  const std::size_t frame_bytes = kHeaderBytes + kFixedBody + PackedElemBytes(count);
  frame.clear();
  frame.reserve(frame_bytes);
  Writer w(frame);
  WriteHeader(w, frame, header, MessageType::kSmpShares, kFixedBody + PackedElemBytes(count));
  // The fields of Fields(SmpShares), in its order, up to the shares' count.
  w.U64(m.eviction, "eviction");
  w.U32(m.attempt, "attempt");
  w.U32(m.round, "round");
  w.U32(m.from_index, "from_index");
  w.U32(static_cast<std::uint32_t>(count), "shares");
  if (frame.size() != kHeaderBytes + kFixedBody) {
    std::fprintf(stderr, "s3oram::wire::StartSmpSharesFrame: size mismatch (%zu != %zu)\n",
                 frame.size(), kHeaderBytes + kFixedBody);
    std::abort();
  }
  const std::size_t offset = frame.size();
  frame.resize(frame_bytes);
  return offset;
}

void EncodeSmpShares(const Header& header, const SmpShares& m, std::span<const Elem> shares,
                     std::vector<std::uint8_t>& frame) {
  const std::size_t offset = StartSmpSharesFrame(header, m, shares.size(), frame);
  if (!PackElems(shares, frame.data() + offset)) {
    std::fprintf(stderr, "s3oram::wire::EncodeSmpShares: a share of 2^31 or more\n");
    std::abort();
  }
}

Status DecodeSmpSharesInto(std::span<const std::uint8_t> frame, Header* header, SmpShares* out) {
  Reader r(frame, "wire frame");
  S3ORAM_RETURN_IF_ERROR(ReadHeader(r, header).status());
  if (header->type != MessageType::kSmpShares) {
    return Status::Corruption(std::string("wire frame: expected SMP_SHARES, got ") +
                              MessageTypeName(header->type));
  }
  Reader body(frame.subspan(kHeaderBytes), MessageTypeName(MessageType::kSmpShares));
  Fields<Reader>(body, *out);
  if (body.ok() && body.remaining() != 0) {
    body.Fail(std::to_string(body.remaining()) + " trailing bytes after the body's last field");
  }
  return body.ok() ? Status::Ok() : body.status();
}

std::optional<MessageType> PeekType(std::span<const std::uint8_t> frame) {
  if (frame.size() < kHeaderBytes) return std::nullopt;
  Reader r(frame.first(8), "wire frame");
  std::uint32_t magic = 0;
  std::uint16_t version = 0, type = 0;
  r.U32(magic, "magic");
  r.U16(version, "version");
  r.U16(type, "type");
  if (!r.ok() || magic != kMagic || version != kWireVersion || IndexOfType(type) == kTypes) {
    return std::nullopt;
  }
  return static_cast<MessageType>(type);
}

Result<Message> Decode(std::span<const std::uint8_t> frame) {
  Reader r(frame, "wire frame");
  Message msg;
  S3ORAM_ASSIGN_OR_RETURN(const std::size_t index, ReadHeader(r, &msg.header));
  auto body = DecodeBody(index, frame.subspan(kHeaderBytes),
                         std::make_index_sequence<kTypes>());
  if (!body.ok()) return body.status();
  msg.body = std::move(body).value();
  return msg;
}

ErrorReply ErrorFromStatus(const Status& s) {
  ErrorReply e;
  e.code = static_cast<std::uint32_t>(s.code());
  e.message = std::string(ClipString(s.message()));
  return e;
}

Status StatusFromError(const ErrorReply& e) {
  using Code = Status::Code;
  // A remote message is relayed as-is (it is diagnostic text, never used for
  // decisions); the code decides how the caller reacts, so only known codes
  // are trusted and anything else is the peer breaking the protocol.
  switch (static_cast<Code>(e.code)) {
    case Code::kInvalidArgument: return Status::InvalidArgument(e.message);
    case Code::kCorruption: return Status::Corruption(e.message);
    case Code::kIoError: return Status::IoError(e.message);
    case Code::kNotFound: return Status::NotFound(e.message);
    case Code::kAlreadyExists: return Status::AlreadyExists(e.message);
    case Code::kUnavailable: return Status::Unavailable(e.message);
    case Code::kOverflow: return Status::Overflow(e.message);
    case Code::kFailedPrecondition: return Status::FailedPrecondition(e.message);
    case Code::kProtocol: return Status::Protocol(e.message);
    case Code::kPermissionDenied: return Status::PermissionDenied(e.message);
    case Code::kLeaseHeld: return Status::LeaseHeld(e.message);
    case Code::kNoSpace: return Status::NoSpace(e.message);
    case Code::kDamaged: return Status::Damaged(e.message);
    case Code::kStaleState:
      // A verdict about a client's own state file; no server makes it.
      return Status::Protocol("peer sent a stale-state error: " + e.message);
    case Code::kIntegrity:
      // Only the client can check a block's authenticity; a server claiming
      // such a failure is not following the protocol.
      return Status::Protocol("peer sent an integrity error: " + e.message);
    case Code::kOk:
      // An ERROR message that reports success is itself a protocol violation;
      // turning it into OK would let a peer make a failed request look applied.
      return Status::Protocol("peer sent an error reply with code OK: " + e.message);
  }
  return Status::Protocol("peer sent an error reply with unknown code " + std::to_string(e.code) +
                          ": " + e.message);
}

}  // namespace s3oram::wire

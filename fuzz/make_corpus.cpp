// make_corpus DIR: writes the seed corpora of the fuzz harnesses into
// DIR/<harness>/, replacing the files there. Deterministic (no randomness, no
// clock): the committed fuzz/corpus is exactly its output, which the ctest
// case fuzz.corpus_up_to_date checks. Seeds are small, valid-looking inputs
// that reach deep into each target (every message type; request sequences that
// init, write, retrieve, evict and commit; documented configs; state-file
// mutations of every kind) so libFuzzer starts from real coverage.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz/handler_input.h"
#include "fuzz/state_mutation.h"
#include "oramcore/math/field.h"
#include "oramcore/tree/geometry.h"
#include "oramcore/wire/wire.h"

namespace {

namespace fs = std::filesystem;
namespace wire = s3oram::wire;
namespace fz = s3oram::fuzz;
using s3oram::TreeGeometry;
using s3oram::field::Elem;
using Bytes = std::vector<std::uint8_t>;

class CorpusWriter {
 public:
  CorpusWriter(const fs::path& root, const std::string& harness) : dir_(root / harness) {
    fs::create_directories(dir_);
    // Only this generator's own output lives here: start from an empty folder.
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.is_regular_file()) fs::remove(e.path());
    }
  }
  void Add(const std::string& name, const Bytes& bytes) {
    std::ofstream out(dir_ / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "make_corpus: cannot write %s\n", (dir_ / name).c_str());
      std::exit(1);
    }
  }
  void Add(const std::string& name, const std::string& text) { Add(name, Bytes(text.begin(), text.end())); }

 private:
  fs::path dir_;
};

// Deterministic, canonical (< p) element vectors.
std::vector<Elem> Elems(std::size_t n, std::uint32_t salt) {
  std::vector<Elem> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = (static_cast<Elem>(i) * 2654435761u + salt) % s3oram::field::kPrime;
  return v;
}

wire::Header Hdr(std::uint64_t seq, std::uint64_t epoch = 1, const wire::FsId& id = fz::kFsId) {
  wire::Header h;
  h.fs_id = id;
  h.epoch = epoch;
  h.seq = seq;
  return h;
}

// ---- wire_decode_fuzz: one frame per message type.
void WireCorpus(const fs::path& root) {
  CorpusWriter w(root, "wire_decode_fuzz");
  const wire::Header h = Hdr(42, 7);
  wire::StatusReply status;
  status.server_index = 2;
  status.initialized = true;
  status.shape = fz::kMediumShape;
  status.epoch = 7;
  status.applied_seq = 41;
  status.applied_evictions = 3;
  status.prepared_eviction = 4;
  status.share_file_bytes = 1 << 20;
  status.allocated_bytes = 4096;
  status.peer_bytes_sent = 123456;
  w.Add("error", wire::Encode(h, wire::ErrorReply{3, "fenced: request epoch 1 is older"}));
  w.Add("status_request", wire::Encode(h, wire::StatusRequest{}));
  w.Add("status_reply", wire::Encode(h, status));
  w.Add("init_request", wire::Encode(h, wire::InitRequest{1, fz::kMediumShape, true}));
  w.Add("init_reply", wire::Encode(h, wire::InitReply{}));
  w.Add("retrieve_request", wire::Encode(h, wire::RetrieveRequest{11, Elems(16, 1), {}}));
  {
    wire::ShareSeed seed;
    seed.seed.fill(7);
    seed.count = 16;
    w.Add("retrieve_request_seeded", wire::Encode(h, wire::RetrieveRequest{11, {}, seed}));
  }
  w.Add("retrieve_reply", wire::Encode(h, wire::RetrieveReply{Elems(20, 2)}));
  w.Add("write_root_request", wire::Encode(h, wire::WriteRootRequest{3, Elems(20, 3), {}}));
  w.Add("write_root_reply", wire::Encode(h, wire::WriteRootReply{}));
  w.Add("retrieve_write_root_request",
        wire::Encode(h, wire::RetrieveWriteRootRequest{3, Elems(20, 3), 11, Elems(16, 1), {}, {}}));
  w.Add("scrub_request", wire::Encode(h, wire::ScrubRequest{2, 5}));
  w.Add("scrub_reply", wire::Encode(h, wire::ScrubReply{2, {0, 1, 0, 0}}));
  wire::ParitySeed seed{};
  for (std::size_t i = 0; i < seed.size(); ++i) seed[i] = static_cast<std::uint8_t>(7 * i + 1);
  w.Add("parity_request", wire::Encode(h, wire::ParityRequest{2, 5, seed}));
  w.Add("parity_reply", wire::Encode(h, wire::ParityReply{2, {0, 1, 0, 0}, Elems(8, 6)}));
  w.Add("evict_check_request", wire::Encode(h, wire::EvictCheckRequest{5, 2, seed}));
  w.Add("evict_check_reply", wire::Encode(h, wire::EvictCheckReply{5, Elems(8, 7), Elems(6, 9)}));
  w.Add("mac_open_request", wire::Encode(h, wire::MacOpenRequest{5, seed}));
  w.Add("mac_open_reply", wire::Encode(h, wire::MacOpenReply{5, Elems(6, 9)}));
  w.Add("slot_share_request", wire::Encode(h, wire::SlotShareRequest{2, 1}));
  w.Add("age_fill_request", wire::Encode(h, wire::AgeFillRequest{1, 1, {}}));
  w.Add("slot_share_reply", wire::Encode(h, wire::SlotShareReply{2, 1, Elems(6, 9)}));
  w.Add("evict_prepare_request",
        wire::Encode(h, wire::EvictPrepareRequest{0, 1, 8, Elems(24, 4), {}}));
  w.Add("evict_prepare_reply", wire::Encode(h, wire::EvictPrepareReply{5}));
  w.Add("evict_started_reply", wire::Encode(h, wire::EvictStartedReply{5, 1}));
  w.Add("evict_result_request", wire::Encode(h, wire::EvictResultRequest{5, 1}));
  w.Add("evict_commit_request", wire::Encode(h, wire::EvictCommitRequest{5}));
  w.Add("evict_commit_reply", wire::Encode(h, wire::EvictCommitReply{6}));
  w.Add("smp_shares", wire::Encode(h, wire::SmpShares{5, 1, 2, 1, Elems(12, 5)}));
  w.Add("lease_acquire", wire::Encode(h, wire::LeaseAcquireRequest{true, "sealed holder"}));
  w.Add("lease_reply", wire::Encode(h, wire::LeaseReply{false, 6, "sealed holder", 1000, 20, 6}));
  w.Add("lease_release", wire::Encode(h, wire::LeaseReleaseRequest{}));
  w.Add("lease_query", wire::Encode(h, wire::LeaseQueryRequest{}));
  w.Add("rebuild_begin_request",
        wire::Encode(h, wire::RebuildBeginRequest{2, fz::kMediumShape, 7, 3, false}));
  w.Add("rebuild_begin_reply", wire::Encode(h, wire::RebuildBeginReply{}));
  {
    wire::RebuildReadRequest read;
    read.target = 2;
    read.participants = {0, 1};
    for (std::size_t i = 0; i < read.nonce.size(); ++i) {
      read.nonce[i] = static_cast<std::uint8_t>(i);
    }
    read.first_bucket = 1;
    read.count = 3;
    w.Add("rebuild_read_request", wire::Encode(h, read));
  }
  w.Add("rebuild_read_reply", wire::Encode(h, wire::RebuildReadReply{1, {0, 1, 0}}));
  w.Add("rebuild_write_request", wire::Encode(h, wire::RebuildWriteRequest{1, {0, 1}, {0, 1}, {}}));
  w.Add("rebuild_write_reply", wire::Encode(h, wire::RebuildWriteReply{3}));
  w.Add("rebuild_finish_request", wire::Encode(h, wire::RebuildFinishRequest{7, 3}));
  w.Add("rebuild_finish_reply", wire::Encode(h, wire::RebuildFinishReply{}));
  w.Add("rebuild_terms", wire::Encode(h, wire::RebuildTerms{2, {}, 1, 0, {0, 1, 0}, Elems(8, 6)}));
  w.Add("empty_vectors", wire::Encode(h, wire::RetrieveRequest{0, {}, {}}));
  w.Add("stats_request", wire::Encode(h, wire::StatsRequest{}));
  w.Add("stats_reply", wire::Encode(h, wire::StatsReply{9, 8, 7, 6, 5, 4, 3, 2, 1, 2, 3, 4, 5,
                                                        6, 7}));
}

// ---- server_handler_fuzz: request sequences (format: fuzz/handler_input.h).
class Session {
 public:
  explicit Session(std::uint8_t start) { bytes_.push_back(start); }
  Session& Frame(const Bytes& frame, std::uint8_t control = 0) {
    bytes_.push_back(control);
    bytes_.push_back(static_cast<std::uint8_t>(frame.size()));
    bytes_.push_back(static_cast<std::uint8_t>(frame.size() >> 8));
    bytes_.insert(bytes_.end(), frame.begin(), frame.end());
    return *this;
  }
  Session& Send(const wire::Header& h, const wire::Body& b, std::uint8_t control = 0) {
    return Frame(wire::Encode(h, b), control);
  }
  // Takes the single-writer lease as `epoch` (every access needs it).
  Session& Lease(std::uint64_t epoch = 1, bool force = false) {
    return Send(Hdr(0, epoch), wire::LeaseAcquireRequest{force, "fuzz"});
  }
  const Bytes& bytes() const { return bytes_; }

 private:
  Bytes bytes_;
};

std::uint8_t Mode(fz::PeerMode m) { return static_cast<std::uint8_t>(m); }

// Requests that fit `s` (a store shape) exactly.
struct Requests {
  wire::StoreShape s;
  TreeGeometry geo() const { return {s.height, s.bucket_size}; }
  wire::RetrieveRequest Retrieve(std::uint64_t leaf_index, std::uint32_t salt) const {
    return {geo().first_leaf() + leaf_index, Elems(geo().path_slots(), salt), {}};
  }
  wire::WriteRootRequest WriteRoot(std::uint32_t slot, std::uint32_t salt) const {
    return {slot, Elems(s.elems_per_slot, salt), {}};
  }
  wire::RetrieveWriteRootRequest RetrieveWriteRoot(std::uint32_t slot, std::uint64_t leaf_index,
                                                   std::uint32_t salt) const {
    return {slot, Elems(s.elems_per_slot, salt), geo().first_leaf() + leaf_index,
            Elems(geo().path_slots(), salt + 1), {}, {}};
  }
  // `participants`: the PREPARE's mask (0: every server).
  wire::EvictPrepareRequest Prepare(std::uint64_t eviction, std::uint32_t attempt,
                                    std::uint32_t participants = 0) const {
    const std::size_t n = (std::size_t{s.height} + 1) * 2 * s.bucket_size * s.bucket_size;
    return {eviction, attempt, geo().EvictionLeaf(eviction), Elems(n, 9), {}, participants};
  }
};

void HandlerCorpus(const fs::path& root) {
  CorpusWriter w(root, "server_handler_fuzz");
  const Requests med{fz::kMediumShape};
  const Requests small{fz::kSmallShape};
  using M = fz::PeerMode;

  w.Add("status", Session(fz::kStartMedium).Send(Hdr(1, 0), wire::StatusRequest{}).bytes());
  w.Add("stats", Session(fz::kStartMedium).Lease().Send(Hdr(1), med.Retrieve(3, 1))
                     .Send(Hdr(2, 0), wire::StatsRequest{}).bytes());
  w.Add("retrieve", Session(fz::kStartMedium).Lease().Send(Hdr(1), med.Retrieve(3, 1)).bytes());
  {
    // Server 0's shares sent as seeds (wire/share_seeds.h): expanded, then
    // served; a seed beside elements and a seed without a count, refused.
    wire::ShareSeed seed;
    seed.seed.fill(5);
    seed.count = static_cast<std::uint32_t>(med.geo().path_slots());
    wire::ShareSeed root_seed = seed;
    root_seed.count = med.s.elems_per_slot;
    wire::ShareSeed no_count = seed;
    no_count.count = 0;
    w.Add("seeded", Session(fz::kStartMedium)
                        .Lease()
                        .Send(Hdr(1), wire::RetrieveRequest{med.geo().first_leaf() + 2, {}, seed})
                        .Send(Hdr(2), wire::RetrieveWriteRootRequest{0, {}, med.geo().first_leaf(),
                                                                     {}, root_seed, seed})
                        .Send(Hdr(3), wire::WriteRootRequest{1, {}, root_seed})
                        .Send(Hdr(4), wire::RetrieveRequest{med.geo().first_leaf(), Elems(4, 1), seed})
                        .Send(Hdr(5), wire::WriteRootRequest{2, {}, no_count})
                        .bytes());
  }
  w.Add("write_then_retrieve", Session(fz::kStartMedium).Lease()
                                   .Send(Hdr(1), med.WriteRoot(2, 2))
                                   .Send(Hdr(2), med.Retrieve(5, 3))
                                   .bytes());
  {
    wire::RetrieveWriteRootRequest bad_select = med.RetrieveWriteRoot(1, 2, 5);
    bad_select.select.pop_back();
    wire::RetrieveWriteRootRequest bad_slot = med.RetrieveWriteRoot(1, 2, 6);
    bad_slot.slot = fz::kMediumShape.bucket_size;
    w.Add("retrieve_write_root", Session(fz::kStartMedium).Lease()
                                     .Send(Hdr(1), med.Retrieve(4, 1))
                                     .Send(Hdr(2), med.RetrieveWriteRoot(0, 5, 2))
                                     .Send(Hdr(2), med.RetrieveWriteRoot(0, 5, 2))  // resend
                                     .Send(Hdr(3), bad_select)
                                     .Send(Hdr(4), bad_slot)
                                     .Send(Hdr(5), med.RetrieveWriteRoot(1, 0, 3))
                                     .bytes());
  }
  wire::ParitySeed check_seed{};
  check_seed[0] = 1;
  // An EVICT_PREPARE starts the eviction (EVICT_STARTED); its computation,
  // and so the peers' behaviour, happens at EVICT_RESULT.
  w.Add("evict", Session(fz::kStartMedium)
                     .Lease()
                     .Send(Hdr(1), med.WriteRoot(0, 4))
                     .Send(Hdr(2), med.Prepare(0, 0))
                     .Send(Hdr(2), med.WriteRoot(0, 5))  // the next round, beside it
                     .Send(Hdr(3), wire::EvictResultRequest{0, 0})
                     .Send(Hdr(3), wire::EvictCheckRequest{0, 1, check_seed})  // wrong attempt
                     .Send(Hdr(3), wire::EvictCheckRequest{0, 0, check_seed})
                     .Send(Hdr(3), wire::MacOpenRequest{0, check_seed})
                     // The root snapshot the prepared eviction reads (bucket 0).
                     .Send(Hdr(3, 0), wire::ParityRequest{0, 1, check_seed})
                     .Send(Hdr(3, 0), wire::SlotShareRequest{0, 0})
                     .Send(Hdr(3), wire::EvictCommitRequest{0})
                     .Send(Hdr(4), wire::StatusRequest{})
                     .Send(Hdr(5, 0), wire::ParityRequest{1, 3, check_seed})
                     .Send(Hdr(6, 0), wire::ParityRequest{0, 2, check_seed})  // out of range
                     .Send(Hdr(7, 0), wire::SlotShareRequest{1, 0})
                     .Send(Hdr(8, 0), wire::SlotShareRequest{1, 1u << 20})  // no such slot
                     .bytes());
  // Participant masks: too few (two of three), one leaving this server out,
  // one naming a server beyond the three, then all three named.
  w.Add("evict_participants", Session(fz::kStartMedium)
                                  .Lease()
                                  .Send(Hdr(1), med.Prepare(0, 1, 0b011))
                                  .Send(Hdr(2), med.Prepare(0, 2, 0b110))
                                  .Send(Hdr(3), med.Prepare(0, 3, 0b1111))
                                  .Send(Hdr(4), med.Prepare(0, 4, 0b111))
                                  .Send(Hdr(4), wire::EvictResultRequest{0, 4})
                                  .bytes());
  w.Add("evict_retry", Session(fz::kStartMedium).Lease()
                           .Send(Hdr(1), med.Prepare(0, 0))
                           .Send(Hdr(1), wire::EvictResultRequest{0, 0}, Mode(M::kTimeout))
                           .Send(Hdr(2), med.Prepare(0, 1))
                           .Send(Hdr(2), med.Prepare(0, 1))  // duplicate: started already
                           .Send(Hdr(2), wire::EvictResultRequest{0, 1})
                           .Send(Hdr(2), wire::EvictResultRequest{0, 1})  // answered from the seal
                           .Send(Hdr(2), wire::EvictResultRequest{0, 7})  // never started
                           .Send(Hdr(3), wire::EvictCommitRequest{0})
                           .Send(Hdr(3), wire::EvictCommitRequest{0})
                           .Send(Hdr(4), med.Prepare(0, 2))  // already committed
                           .Send(Hdr(4), wire::EvictResultRequest{0, 2})
                           .bytes());
  w.Add("evict_bad_peers", Session(fz::kStartSmall).Lease()
                               .Send(Hdr(1), small.Prepare(0, 0))
                               .Send(Hdr(1), wire::EvictResultRequest{0, 0}, Mode(M::kShortShares))
                               .Send(Hdr(2), small.Prepare(0, 1))
                               .Send(Hdr(2), wire::EvictResultRequest{0, 1}, Mode(M::kMissingPeer))
                               .Send(Hdr(3), small.Prepare(0, 2))
                               .Send(Hdr(3), wire::EvictResultRequest{0, 2}, Mode(M::kSendFails))
                               .Send(Hdr(4), small.Prepare(0, 3))
                               .Send(Hdr(4), wire::EvictResultRequest{0, 3}, Mode(M::kLongShares))
                               .Send(Hdr(5), small.Prepare(0, 4))
                               .Send(Hdr(5), wire::EvictResultRequest{0, 4})
                               .Send(Hdr(6), wire::EvictCommitRequest{0})
                               .Send(Hdr(7), small.Prepare(1, 0))
                               .Send(Hdr(7), wire::EvictResultRequest{1, 0})
                               .Send(Hdr(8), wire::EvictCommitRequest{1})
                               .bytes());
  w.Add("init", Session(fz::kStartEmpty)
                    .Send(Hdr(1, 0), wire::StatusRequest{})
                    .Send(Hdr(2), wire::InitRequest{fz::kServerIndex, fz::kSmallShape, false})
                    .Send(Hdr(2), wire::InitRequest{fz::kServerIndex, fz::kSmallShape, false})
                    .Lease(2)
                    .Send(Hdr(3, 2), small.WriteRoot(1, 5))
                    .Send(Hdr(4, 2), small.Retrieve(2, 6))
                    .bytes());
  wire::FsId other = fz::kFsId;
  other[0] ^= 0xff;
  w.Add("init_overwrite", Session(fz::kStartMedium)
                              .Send(Hdr(1, 1, other), wire::InitRequest{fz::kServerIndex, fz::kSmallShape, false})
                              .Lease()
                              .Send(Hdr(2, 1, other), wire::InitRequest{fz::kServerIndex, fz::kSmallShape, true})
                              .Lease(2)
                              .Send(Hdr(3), small.WriteRoot(0, 7), fz::kFixFsId)
                              .Send(Hdr(4), wire::InitRequest{1, fz::kSmallShape, true})
                              .Send(Hdr(5), wire::InitRequest{fz::kServerIndex, {0, 1, 1}, true})
                              .bytes());
  w.Add("fencing", Session(fz::kStartSmall)
                       .Lease(5)
                       .Send(Hdr(1, 5), small.WriteRoot(0, 8))
                       .Lease(9)
                       .Lease(9, true)
                       .Send(Hdr(2, 3), small.WriteRoot(1, 8))
                       .Send(Hdr(3, 9), wire::StatusRequest{})
                       .Send(Hdr(4, 5), wire::EvictCommitRequest{0})
                       .Send(Hdr(5, 9), small.Retrieve(1, 8))
                       .bytes());

  Bytes grown = wire::Encode(Hdr(6), med.WriteRoot(1, 9));
  grown.insert(grown.end(), {1, 0, 0, 0});  // one element too many once the length is fixed
  Bytes truncated = wire::Encode(Hdr(7), med.Retrieve(0, 1));
  truncated.resize(20);
  w.Add("malformed", Session(fz::kStartMedium)
                         .Lease()
                         .Frame(truncated)
                         .Frame(Bytes{0x00, 0x01, 0x02, 0x03})
                         .Send(Hdr(8), wire::StatusReply{})
                         .Send(Hdr(9), wire::SmpShares{0, 0, 0, 1, Elems(4, 1)})
                         .Send(Hdr(10), wire::ErrorReply{2, "x"})
                         .Frame(grown, fz::kFixLength)
                         .Send(Hdr(11), wire::RetrieveRequest{3, Elems(16, 1), {}})
                         .Send(Hdr(12), wire::RetrieveRequest{9, Elems(15, 1), {}})
                         .Send(Hdr(13), wire::WriteRootRequest{4, Elems(20, 1), {}})
                         .Send(Hdr(14), wire::EvictPrepareRequest{0, 0, 9, Elems(128, 1), {}})
                         .Send(Hdr(15), med.Prepare(5, 0))
                         .Send(Hdr(15), wire::EvictResultRequest{5, 0})
                         .Send(Hdr(16), wire::EvictCommitRequest{0})
                         .bytes());
  w.Add("lease", Session(fz::kStartSmall)
                     .Send(Hdr(1, 3), wire::LeaseQueryRequest{})
                     .Lease(3)
                     .Lease(3)
                     .Lease(4)
                     .Send(Hdr(2, 4), wire::LeaseReleaseRequest{})
                     .Lease(2, true)
                     .Lease(6, true)
                     .Send(Hdr(3, 3), small.WriteRoot(0, 1))
                     .Send(Hdr(4, 6), wire::LeaseReleaseRequest{})
                     .Send(Hdr(5, 6), small.Retrieve(0, 1))
                     .bytes());
  // A rebuild as the target sees it (begin refused without force, then
  // forced; a write; an early finish; normal requests refused), then the
  // participant side with bad participant lists (the handler has no key file,
  // so a well-formed read fails at the key).
  wire::RebuildReadRequest bad_read;
  bad_read.target = fz::kServerIndex;
  bad_read.participants = {0, 1};
  bad_read.first_bucket = 1;
  bad_read.count = 1;
  w.Add("rebuild",
        Session(fz::kStartSmall)
            .Send(Hdr(1), bad_read)
            .Send(Hdr(2), wire::RebuildBeginRequest{fz::kServerIndex, fz::kSmallShape, 1, 0, false})
            .Send(Hdr(3), wire::RebuildBeginRequest{fz::kServerIndex, fz::kSmallShape, 1, 0, true})
            .Send(Hdr(4), wire::RebuildWriteRequest{1, {0, 1}, {1, 2}, {}})
            .Send(Hdr(5), wire::RebuildFinishRequest{1, 0})
            .Send(Hdr(6), small.WriteRoot(0, 3))
            .Send(Hdr(7), wire::StatusRequest{})
            .bytes());
  // A catch-up of the live store: refused beyond its evictions, then begun;
  // writes in any order (holes as zeros), a finish, and one refused on an
  // empty store.
  wire::RebuildBeginRequest catch_up{fz::kServerIndex, fz::kSmallShape, 1, 0, false, true};
  wire::RebuildBeginRequest behind = catch_up;
  behind.applied_evictions = 0;
  w.Add("catch_up", Session(fz::kStartSmall)
                        .Send(Hdr(1), small.WriteRoot(0, 3))
                        .Send(Hdr(2), catch_up)
                        .Send(Hdr(3), wire::RebuildWriteRequest{3, {0, 1}, {1, 2}, {}})
                        .Send(Hdr(4), wire::RebuildWriteRequest{1, {1}, {1, 2}, {}})
                        .Send(Hdr(5), wire::RebuildFinishRequest{1, 0})
                        .Send(Hdr(6), behind)
                        .Send(Hdr(7), wire::StatusRequest{})
                        .bytes());
  w.Add("catch_up_no_store", Session(fz::kStartEmpty)
                                 .Send(Hdr(1), catch_up)
                                 .Send(Hdr(2), wire::RebuildFinishRequest{1, 0})
                                 .bytes());
  w.Add("no_store", Session(fz::kStartEmpty)
                        .Send(Hdr(1), med.Retrieve(0, 1))
                        .Send(Hdr(2), wire::EvictCommitRequest{0})
                        .bytes());
}

// ---- server_config_fuzz: TOML texts.
void ConfigCorpus(const fs::path& root) {
  CorpusWriter w(root, "server_config_fuzz");
  w.Add("documented_example", std::string(R"(# s3oram-serverd configuration
[server]
index = 0
listen = "tcp://127.0.0.1:7300"
peer_listen = "tcp://127.0.0.1:7310"
data_dir = "/var/lib/s3oramfs/0"
threads = 0
sync = true
peer_timeout_ms = 30000
log_level = "info"
secret_key_file = "/etc/s3oramfs/server.key"
authorized_clients = ["Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"]

[[peer]]
index = 1
endpoint = "tcp://127.0.0.1:7311"
public_key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"

[[peer]]
index = 2
endpoint = "tcp://127.0.0.1:7312"
public_key = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"
)"));
  w.Add("minimal_ipc", std::string(R"([server]
index = 2
listen = "ipc:///run/s3oram/2.sock"
peer_listen = "ipc:///run/s3oram/2-peer.sock"
data_dir = "d"
secret_key_file = "/etc/s3oramfs/server.key"
authorized_clients = ["Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"]
[[peer]]
index = 0
endpoint = "ipc:///run/s3oram/0-peer.sock"
public_key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
[[peer]]
index = 1
endpoint = "ipc:///run/s3oram/1-peer.sock"
public_key = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"
)"));
  w.Add("inline_tables", std::string(R"(server = { index = 1, listen = "tcp://*:7301", peer_listen = "tcp://[::1]:7311", data_dir = "/srv/s3", sync = false, log_level = "debug", threads = 4, peer_timeout_ms = 1, secret_key_file = "k", authorized_clients = ["Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"] }
peer = [ { index = 0, endpoint = "tcp://host-a.example:7310", public_key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7" }, { index = 2, endpoint = "tcp://10.0.0.3:7312", public_key = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6" } ]
)"));
  w.Add("escapes", std::string(R"([server]
index = 3
listen = 'tcp://127.0.0.1:1'
peer_listen = "tcp://127.0.0.1:65535"
data_dir = "/data/\"quoted\"\ttab\\back\u00e9\u007F"
log_level = "trace"
secret_key_file = "/etc/s3oramfs/server.key"
authorized_clients = ["Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"]
[[peer]]
index = 4
endpoint = "tcp://a_b-c.d:2"
public_key = 'rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7'
[[peer]]
index = 5
endpoint = """tcp://multi.line:3"""
public_key = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"
)"));
  w.Add("unknown_key", std::string("[server]\nindex = 0\nlisten = \"tcp://127.0.0.1:1\"\nlsten = 1\n"));
  w.Add("syntax_error", std::string("[server\nindex = = 0\n"));
}

// ---- client_state_fuzz: mutation scripts (format: fuzz/state_mutation.h).
class ScriptWriter {
 public:
  ScriptWriter& U8(std::uint8_t v) {
    b_.push_back(v);
    return *this;
  }
  ScriptWriter& Le(std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) b_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  ScriptWriter& Small(std::int8_t v) { return U8(fz::kSmallInt).U8(static_cast<std::uint8_t>(v)); }
  ScriptWriter& Int(std::int64_t v) { return U8(fz::kInt64).Le(static_cast<std::uint64_t>(v), 8); }
  ScriptWriter& Text(const std::string& s) {
    U8(fz::kText).U8(static_cast<std::uint8_t>(s.size()));
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  ScriptWriter& Blob(const Bytes& s) {
    U8(fz::kBlob).U8(static_cast<std::uint8_t>(s.size()));
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  ScriptWriter& Null() { return U8(fz::kNull); }
  ScriptWriter& Real(std::uint64_t bits) { return U8(fz::kReal).Le(bits, 8); }
  // Op headers; the operands follow with the value helpers above.
  ScriptWriter& Meta(std::size_t key) { return U8(fz::kMeta).U8(static_cast<std::uint8_t>(key)); }
  ScriptWriter& Insert(std::size_t table) { return U8(fz::kInsert).U8(static_cast<std::uint8_t>(table)); }
  ScriptWriter& UpdateRow(std::size_t table, std::size_t col) {
    return U8(fz::kUpdateRow).U8(static_cast<std::uint8_t>(table)).U8(static_cast<std::uint8_t>(col));
  }
  ScriptWriter& UpdateAll(std::size_t table, std::size_t col) {
    return U8(fz::kUpdateAll).U8(static_cast<std::uint8_t>(table)).U8(static_cast<std::uint8_t>(col));
  }
  ScriptWriter& Delete(std::size_t table) { return U8(fz::kDelete).U8(static_cast<std::uint8_t>(table)); }
  ScriptWriter& Pragma(bool application_id, std::int32_t v) {
    return U8(fz::kPragma).U8(application_id ? 1 : 0).Le(static_cast<std::uint32_t>(v), 4);
  }
  ScriptWriter& Schema(fz::StateSchemaChange c, std::size_t table) {
    return U8(fz::kSchema).U8(c).U8(static_cast<std::uint8_t>(table));
  }
  ScriptWriter& Poke(std::uint16_t offset, std::uint8_t byte) { return U8(fz::kPoke).Le(offset, 2).U8(byte); }
  const Bytes& bytes() const { return b_; }

 private:
  Bytes b_;
};

std::size_t MetaKey(const std::string& name) {
  for (std::size_t i = 0; i < fz::kMetaKeyCount; ++i) {
    if (name == fz::kMetaKeys[i]) return i;
  }
  std::fprintf(stderr, "make_corpus: unknown meta key %s\n", name.c_str());
  std::exit(1);
}

void StateCorpus(const fs::path& root) {
  CorpusWriter w(root, "client_state_fuzz");
  enum : std::size_t { kMeta = 0, kServers = 1, kCounters = 2, kPositions = 3, kPending = 4 };
  w.Add("unchanged", Bytes{});
  w.Add("meta_params", ScriptWriter()
                           .Meta(MetaKey("height")).Small(5)
                           .Meta(MetaKey("capacity_blocks")).Int(std::int64_t{1} << 40)
                           .Meta(MetaKey("bucket_size")).Small(0)
                           .bytes());
  w.Add("meta_types", ScriptWriter()
                          .Meta(MetaKey("fs_id")).Blob(Bytes(15, 0xab))
                          .Meta(MetaKey("allow_unsafe")).Small(2)
                          .Meta(MetaKey("threshold")).Text("1")
                          .Meta(MetaKey("lambda")).Real(0x4054000000000000)  // 80.0
                          .bytes());
  w.Add("position_added", ScriptWriter()
                              .Insert(kPositions).Small(4).Small(10).Small(3).Small(0).Small(1)
                              .bytes());
  w.Add("position_collides", ScriptWriter()
                                 .Insert(kPositions).Small(5).Small(9).Small(3).Small(1).Small(0)
                                 .bytes());
  w.Add("position_bad_values", ScriptWriter()
                                   .UpdateRow(kPositions, 2).Small(1).Text("3")
                                   .UpdateRow(kPositions, 1).Small(2).Int(-1)
                                   .UpdateRow(kPositions, 3).Small(3).Int(std::int64_t{1} << 33)
                                   .UpdateRow(kPositions, 0).Small(0).Int(-8)
                                   .bytes());
  w.Add("counters", ScriptWriter()
                        .Insert(kCounters).Small(1).Small(0).Small(0).Small(0).Small(0)
                        .UpdateAll(kCounters, 4).Int(-1)
                        .bytes());
  w.Add("counters_missing", ScriptWriter().Delete(kCounters).Small(0).bytes());
  w.Add("servers_gap", ScriptWriter()
                           .Delete(kServers).Small(1)
                           .Insert(kServers).Small(7).Null()
                           .UpdateRow(kServers, 1).Small(0).Blob(Bytes{0x74, 0x00, 0x70})
                           .bytes());
  w.Add("pending", ScriptWriter()
                       .UpdateRow(kPending, 1).Small(2).Blob(Bytes{0x65, 0x76})
                       .Insert(kPending).Int(-5).Text("evict").Null()
                       .UpdateAll(kPending, 2).Text("")
                       .bytes());
  w.Add("pragmas", ScriptWriter().Pragma(false, 2).Pragma(true, 0).bytes());
  w.Add("schema", ScriptWriter()
                      .Schema(fz::kRename, kPending)
                      .Schema(fz::kAddColumn, kMeta)
                      .Schema(fz::kRecreate, kPositions)
                      .Schema(fz::kDrop, kServers)
                      .bytes());
  w.Add("pokes", ScriptWriter()
                     .Poke(18, 1)   // file format (WAL) bytes
                     .Poke(28, 0xff)  // database size in pages
                     .Poke(4200, 0x0d)
                     .bytes());
  w.Add("meta_row_deleted", ScriptWriter().Delete(kMeta).U8(static_cast<std::uint8_t>(MetaKey("parties"))).bytes());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus DIR   (writes DIR/<harness>/ seed files)\n");
    return 2;
  }
  const fs::path root = argv[1];
  WireCorpus(root);
  HandlerCorpus(root);
  ConfigCorpus(root);
  StateCorpus(root);
  return 0;
}

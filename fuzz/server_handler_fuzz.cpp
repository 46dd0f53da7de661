// libFuzzer harness: s3oram-serverd's request handling in process
// (serverd/request_handler.h) against a real ShareStore in a private temporary
// directory, with stub peers for the SMP rounds of EVICT_PREPARE.
//
// Feeds: a sequence of request frames (format in fuzz/handler_input.h), each
// handed to RequestHandler::Handle exactly as Server does with a client frame.
// Every input starts from the same state (no store, or a fresh small or medium
// store), so any finding replays deterministically.
//
// Asserts (abort on violation), for every frame:
//   * the reply decodes and echoes the request's seq (read from the header
//     bytes when the frame is at least a header long, 0 otherwise); the reply
//     to a decodable request carries the store's fs id when there is a store;
//   * an undecodable frame gets an ErrorReply with code Corruption; a decoded
//     frame gets either an ErrorReply with a non-OK code or the reply type that
//     belongs to its request type (RETRIEVE: m answer elements; PREPARE/COMMIT:
//     the eviction asked for); non-request types are always refused;
//   * a refused request other than INIT leaves the store's meta unchanged, and
//     no request lowers epoch, applied_seq or applied_evictions or changes the
//     store's fs id and shape (only INIT replaces a store);
//   * an EVICT_PREPARE whose stub peers misbehave (timeout, failed send, a
//     missing peer, too few or too many shares) is refused;
//   * an INIT of a shape no client can use (a request for it would exceed the
//     wire's vector limit) is refused;
// and at the end of the input: a new handler (a server restart) opens the data
// directory, and finds exactly the meta and sealed eviction the old one had.
// ASan/UBSan catch out-of-bounds accesses and undefined behaviour throughout.
//
// Not fed: INIT requests whose shape is within the wire limits (so a client
// can use it) but needs more than kMaxPathElems elements per tree path. The
// server accepts those by design and then needs (H+1)*Z*m elements of memory
// per RETRIEVE: a cost of the parameters, not a bug.
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "fuzz/handler_input.h"
#include "oramcore/base/status.h"
#include "oramcore/math/field.h"
#include "oramcore/wire/wire.h"
#include "serverd/config.h"
#include "serverd/peer_exchange.h"
#include "serverd/request_handler.h"
#include "serverd/share_store.h"

namespace {

using s3oram::Result;
using s3oram::Status;
using s3oram::field::Elem;
namespace wire = s3oram::wire;
namespace fz = s3oram::fuzz;
using s3oram::serverd::PeerExchange;
using s3oram::serverd::RequestHandler;
using s3oram::serverd::ServerConfig;
using s3oram::serverd::ServerMeta;
using s3oram::serverd::ShareStore;
using s3oram::serverd::SmpRound;

constexpr std::uint64_t kMaxPathElems = std::uint64_t{1} << 21;
constexpr std::size_t kMaxRecords = 64;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "server_handler_fuzz: %s\n", what.c_str());
  std::abort();
}

// Peers 1 and 2 of a three-party cluster, in process. In kEcho mode each peer
// "answers" with a copy of what this server sent it: well-formed (right count,
// canonical elements), which is all the handler can check; the other modes are
// the failures a real exchange can report or a hostile peer can cause.
class StubPeers final : public PeerExchange {
 public:
  fz::PeerMode mode = fz::PeerMode::kEcho;
  int sends = 0;  // Send calls since the last reset of this counter

  Status Send(const std::vector<std::vector<std::uint8_t>>& frames) override {
    ++sends;
    if (mode == fz::PeerMode::kSendFails) return Status::IoError("stub: send failed");
    if (frames.size() != 3) Fail("Send got " + std::to_string(frames.size()) + " frames");
    for (std::size_t p = 1; p < 3; ++p) {
      wire::Header h;
      wire::SmpShares m;
      const Status st = wire::DecodeSmpSharesInto(frames[p], &h, &m);
      if (!st.ok()) Fail("Send got a frame that does not decode: " + st.ToString());
      answers_[p - 1] = std::move(m.shares);
    }
    if (mode == fz::PeerMode::kShortShares && !answers_[1].empty()) answers_[1].pop_back();
    if (mode == fz::PeerMode::kLongShares) answers_[0].push_back(0);
    return Status::Ok();
  }
  Result<std::vector<std::span<const Elem>>> Await(const SmpRound& r) override {
    if (mode == fz::PeerMode::kTimeout) {
      return Status::Unavailable("stub: no shares for round " + std::to_string(r.round));
    }
    std::vector<std::span<const Elem>> out{answers_[0]};
    if (mode != fz::PeerMode::kMissingPeer) out.emplace_back(answers_[1]);
    return out;
  }
  void Release(const SmpRound&) override {}
  void Reset() override {}
  std::uint64_t bytes_sent() const override { return 0; }

  // Elements of one bucket of the store the handler holds (0: none); set
  // before each request.
  std::size_t bucket_elems = 0;

  // Rebuild terms this server sends as a survivor must decode; when it is
  // the target, each participant "sends" well-formed terms of the length
  // the range needs (in kEcho mode), which is all the handler can check.
  Status SendTerms(std::uint32_t target, std::span<const std::uint8_t> frame) override {
    if (mode == fz::PeerMode::kSendFails) return Status::IoError("stub: send failed");
    if (target != 1 && target != 2) Fail("SendTerms to " + std::to_string(target));
    auto m = wire::Decode(frame);
    if (!m.ok() || !std::holds_alternative<wire::RebuildTerms>(m->body)) {
      Fail("SendTerms got a frame that is not REBUILD_TERMS");
    }
    return Status::Ok();
  }
  Result<std::vector<std::vector<Elem>>> AwaitTerms(
      const s3oram::serverd::TermsWanted& w) override {
    if (mode == fz::PeerMode::kTimeout) return Status::Unavailable("stub: no terms");
    std::size_t written = 0;
    for (std::uint8_t f : w.holes) written += f ? 0 : 1;
    // Past what a fuzz input could carry itself, as if the peers timed out.
    if (written * bucket_elems > kMaxPathElems) return Status::Unavailable("stub: too large");
    std::vector<Elem> terms(written * bucket_elems);
    for (std::size_t i = 0; i < terms.size(); ++i) terms[i] = static_cast<Elem>(i % 1000);
    std::vector<std::vector<Elem>> out(w.from.size(), terms);
    if (mode == fz::PeerMode::kShortShares && !out.empty() && !out.back().empty()) {
      out.back().pop_back();
    }
    if (mode == fz::PeerMode::kLongShares && !out.empty()) out.front().push_back(0);
    if (mode == fz::PeerMode::kMissingPeer && !out.empty()) out.pop_back();
    return out;
  }

 private:
  std::vector<Elem> answers_[2];
};

struct Env {
  std::filesystem::path base;
  ServerConfig config;
  StubPeers peers;
  bool verbose = false;  // S3ORAM_FUZZ_VERBOSE set: print each request and its outcome
};

Env* g_env = nullptr;

void RemoveTempDir() {
  if (g_env != nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(g_env->base, ec);
  }
}

Env& Setup() {
  if (g_env != nullptr) return *g_env;
  spdlog::set_level(spdlog::level::off);  // every refused request logs a warning
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/s3oram-handler-fuzz-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) Fail("mkdtemp " + templ + " failed");
  g_env = new Env();
  g_env->base = templ;
  g_env->verbose = std::getenv("S3ORAM_FUZZ_VERBOSE") != nullptr;
  std::atexit(RemoveTempDir);
  ServerConfig& c = g_env->config;
  c.index = fz::kServerIndex;
  c.listen = "tcp://127.0.0.1:1";  // never bound: the handler has no sockets
  c.peer_listen = "tcp://127.0.0.1:2";
  c.data_dir = (g_env->base / "data").string();
  c.threads = 1;
  c.sync = false;  // nothing here needs to survive a power cut
  c.secret_key_file = "/nonexistent/server.key";  // the handler holds no sockets and no keys
  c.authorized_clients = {"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"};
  c.peers = {{1, "tcp://127.0.0.1:3", "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"}, {2, "tcp://127.0.0.1:4", "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"}};
  std::filesystem::create_directories(c.data_dir);
  return *g_env;
}

// Puts the data directory into the state `start` names.
void ResetDataDir(Env& env, std::uint8_t start) {
  for (const char* f : {"shares.bin", "shadow.bin", "shares.bin.tmp", "shares.bin.rebuild", "lease",
                        "lease.tmp"}) {
    ::unlink((env.config.data_dir + "/" + f).c_str());
  }
  // Client-state backups (serverd/backup_store.h) an earlier input uploaded.
  for (const auto& e : std::filesystem::directory_iterator(env.config.data_dir)) {
    if (e.path().filename().string().rfind("backup-", 0) == 0) std::filesystem::remove(e.path());
  }
  if (start % 3 == fz::kStartEmpty) return;
  ServerMeta meta;
  meta.fs_id = fz::kFsId;
  meta.server_index = fz::kServerIndex;
  meta.shape = start % 3 == fz::kStartSmall ? fz::kSmallShape : fz::kMediumShape;
  auto store = ShareStore::Create(env.config.data_dir, meta, /*overwrite=*/true, /*sync=*/false);
  if (!store.ok()) Fail("creating the start store: " + store.status().ToString());
}

std::unique_ptr<RequestHandler> NewHandler(Env& env) {
  auto h = RequestHandler::Create(env.config, env.peers);
  if (!h.ok()) Fail("RequestHandler::Create: " + h.status().ToString());
  return std::move(h).value();
}

std::uint64_t Le(std::span<const std::uint8_t> b, std::size_t off, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t{b[off + i]} << (8 * i);
  return v;
}

bool SameMeta(const ServerMeta& a, const ServerMeta& b) {
  return a.fs_id == b.fs_id && a.server_index == b.server_index && a.shape == b.shape &&
         a.epoch == b.epoch && a.applied_seq == b.applied_seq &&
         a.applied_evictions == b.applied_evictions;
}

// True if no client can use shape `s`: some request for it would exceed the
// wire's vector limit (the client-side rule of ValidateParams). The server
// must refuse to INIT such a shape.
bool BeyondWireLimits(const wire::StoreShape& s) {
  const std::uint64_t levels = std::uint64_t{s.height} + 1, Z = s.bucket_size;
  return levels * 2 * Z * Z > wire::kMaxElems || 2 * Z * s.elems_per_slot > wire::kMaxElems ||
         levels * Z > wire::kMaxElems;
}

// True for an INIT of a shape this harness does not feed (see the header).
bool TooCostly(const std::vector<std::uint8_t>& frame) {
  auto m = wire::Decode(frame);
  if (!m.ok()) return false;
  const auto* init = std::get_if<wire::InitRequest>(&m->body);
  if (init == nullptr) return false;
  const wire::StoreShape& s = init->shape;
  const std::uint64_t path = (std::uint64_t{s.height} + 1) * s.bucket_size * s.elems_per_slot;
  return !BeyondWireLimits(s) && path > kMaxPathElems;
}

// The reply type a successful request must get, or nullopt for types a server
// never accepts.
std::optional<wire::MessageType> ExpectedReply(wire::MessageType t) {
  using T = wire::MessageType;
  switch (t) {
    case T::kStatusRequest: return T::kStatusReply;
    case T::kInitRequest: return T::kInitReply;
    case T::kRetrieveRequest: return T::kRetrieveReply;
    case T::kWriteRootRequest: return T::kWriteRootReply;
    case T::kEvictPrepareRequest: return T::kEvictStartedReply;
    case T::kEvictResultRequest: return T::kEvictPrepareReply;
    case T::kEvictCommitRequest: return T::kEvictCommitReply;
    case T::kLeaseAcquireRequest: return T::kLeaseReply;
    case T::kLeaseReleaseRequest: return T::kLeaseReply;
    case T::kLeaseQueryRequest: return T::kLeaseReply;
    case T::kRebuildBeginRequest: return T::kRebuildBeginReply;
    case T::kRebuildReadRequest: return T::kRebuildReadReply;
    case T::kRebuildWriteRequest: return T::kRebuildWriteReply;
    case T::kRebuildFinishRequest: return T::kRebuildFinishReply;
    case T::kBackupPutRequest: return T::kBackupPutReply;
    case T::kBackupListRequest: return T::kBackupListReply;
    case T::kBackupGetRequest: return T::kBackupGetReply;
    case T::kStatsRequest: return T::kStatsReply;
    case T::kRetrieveWriteRootRequest: return T::kRetrieveReply;
    case T::kScrubRequest: return T::kScrubReply;
    case T::kParityRequest: return T::kParityReply;
    case T::kEvictCheckRequest: return T::kEvictCheckReply;
    case T::kMacOpenRequest: return T::kMacOpenReply;
    case T::kSlotShareRequest: return T::kSlotShareReply;
    case T::kAgeFillRequest: return T::kAgeFillReply;
    default: return std::nullopt;
  }
}

void CheckReply(const std::vector<std::uint8_t>& frame, const std::vector<std::uint8_t>& reply,
                const RequestHandler& handler, const StubPeers& peers) {
  auto r = wire::Decode(reply);
  if (!r.ok()) Fail("the reply does not decode: " + r.status().ToString());
  const std::uint64_t seq = frame.size() >= wire::kHeaderBytes ? Le(frame, fz::kSeqOffset, 8) : 0;
  if (r->header.seq != seq) Fail("the reply does not echo the request's seq");
  const auto* error = std::get_if<wire::ErrorReply>(&r->body);
  if (error != nullptr && wire::StatusFromError(*error).ok()) Fail("an error reply with code OK");

  auto req = wire::Decode(frame);
  if (!req.ok()) {
    if (error == nullptr || error->code != static_cast<std::uint32_t>(Status::Code::kCorruption)) {
      Fail("an undecodable frame did not get a Corruption error");
    }
    return;
  }
  if (handler.store() != nullptr && r->header.fs_id != handler.store()->meta().fs_id) {
    Fail("the reply to a decodable request does not carry the store's fs id");
  }
  const auto expected = ExpectedReply(req->header.type);
  if (!expected) {
    if (error == nullptr) Fail("a non-request message was not refused");
    return;
  }
  if (error != nullptr) return;
  if (r->header.type != *expected) Fail("a request got the wrong reply type");
  if (const auto* init = std::get_if<wire::InitRequest>(&req->body);
      init != nullptr && BeyondWireLimits(init->shape)) {
    Fail("INIT accepted a shape whose messages exceed the wire limit");
  }
  if (const auto* rr = std::get_if<wire::RetrieveReply>(&r->body)) {
    if (handler.store() == nullptr || rr->answer.size() != handler.store()->tree().slot_elems()) {
      Fail("a RETRIEVE answer is not one slot long");
    }
  }
  if (const auto* st = std::get_if<wire::EvictStartedReply>(&r->body)) {
    const auto& q = std::get<wire::EvictPrepareRequest>(req->body);
    if (st->eviction != q.eviction || st->attempt != q.attempt) {
      Fail("EVICT_STARTED names another eviction or attempt");
    }
  }
  if (const auto* pr = std::get_if<wire::EvictPrepareReply>(&r->body)) {
    if (pr->eviction != std::get<wire::EvictResultRequest>(req->body).eviction) {
      Fail("an EVICT_RESULT reply names another eviction");
    }
    if (peers.sends > 0 && peers.mode != fz::PeerMode::kEcho &&
        static_cast<std::uint8_t>(peers.mode) <= static_cast<std::uint8_t>(fz::PeerMode::kLongShares)) {
      Fail("a PREPARE succeeded although its SMP round failed or peers sent bad shares");
    }
  }
  if (const auto* pr = std::get_if<wire::ParityReply>(&r->body)) {
    const auto& q = std::get<wire::ParityRequest>(req->body);
    const std::uint64_t z = handler.store() ? handler.store()->meta().shape.bucket_size : 0;
    // Bucket 0 is the pending eviction's root snapshot: one bucket if the
    // store holds one, else an empty answer (wire::kRootSnapshotBucket).
    const bool snapshot = handler.store() && handler.store()->scrub().HoldsPendingRootSnapshot();
    const std::uint64_t buckets =
        q.first_bucket != wire::kRootSnapshotBucket ? q.count : (snapshot ? 1 : 0);
    if (pr->first_bucket != q.first_bucket || pr->damaged.size() != buckets * z ||
        pr->digests.size() != buckets * z * wire::kParityElemsPerSlot) {
      Fail("a PARITY reply does not cover exactly the range asked for");
    }
  }
  if (const auto* cr = std::get_if<wire::EvictCheckReply>(&r->body)) {
    if (handler.store() == nullptr) Fail("an EVICT_CHECK was answered without a store");
    const auto& shape = handler.store()->meta().shape;
    if (cr->eviction != std::get<wire::EvictCheckRequest>(req->body).eviction ||
        cr->digests.size() != 2ull * shape.height * shape.bucket_size * wire::kParityElemsPerSlot) {
      Fail("an EVICT_CHECK reply is not the digests of one eviction's 2H buckets");
    }
    if (cr->combination.size() != wire::kEvictCheckCombinations * shape.elems_per_slot) {
      Fail("an EVICT_CHECK reply does not hold its combinations of one slot each");
    }
    for (Elem e : cr->combination) {
      if (e >= s3oram::field::kPrime) Fail("an EVICT_CHECK combination holds a non-canonical element");
    }
  }
  if (const auto* mr = std::get_if<wire::MacOpenReply>(&r->body)) {
    if (handler.store() == nullptr) Fail("a MAC_OPEN was answered without a store");
    if (mr->eviction != std::get<wire::MacOpenRequest>(req->body).eviction ||
        mr->combination.size() !=
            wire::kEvictCheckCombinations * handler.store()->meta().shape.elems_per_slot) {
      Fail("a MAC_OPEN reply is not the combinations of the eviction asked for");
    }
  }
  if (const auto* sr = std::get_if<wire::SlotShareReply>(&r->body)) {
    if (handler.store() == nullptr) Fail("a SLOT_SHARE was answered without a store");
    const auto& q = std::get<wire::SlotShareRequest>(req->body);
    if (sr->bucket != q.bucket || sr->slot != q.slot ||
        sr->share.size() != handler.store()->meta().shape.elems_per_slot) {
      Fail("a SLOT_SHARE reply is not one share of the slot asked for");
    }
  }
  if (std::holds_alternative<wire::EvictCommitReply>(r->body) && handler.store() == nullptr) {
    Fail("a COMMIT succeeded without a store");
  }
}

void PrintExchange(const std::vector<std::uint8_t>& frame, const std::vector<std::uint8_t>& reply) {
  auto req = wire::Decode(frame);
  auto r = wire::Decode(reply);
  std::string outcome = wire::MessageTypeName(r->header.type);
  if (const auto* e = std::get_if<wire::ErrorReply>(&r->body)) outcome += ": " + e->message;
  std::fprintf(stderr, "  %s -> %s\n",
               req.ok() ? wire::MessageTypeName(req->header.type) : "(undecodable)",
               outcome.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Env& env = Setup();
  if (size == 0) return 0;
  const std::span<const std::uint8_t> in(data, size);
  ResetDataDir(env, in[0]);
  auto handler = NewHandler(env);

  std::size_t pos = 1;
  for (std::size_t n = 0; n < kMaxRecords && pos + 3 <= in.size(); ++n) {
    const std::uint8_t control = in[pos];
    const std::size_t declared = static_cast<std::size_t>(Le(in, pos + 1, 2));
    pos += 3;
    const std::size_t len = std::min(declared, in.size() - pos);
    std::vector<std::uint8_t> frame(in.begin() + static_cast<std::ptrdiff_t>(pos),
                                    in.begin() + static_cast<std::ptrdiff_t>(pos + len));
    pos += len;

    const ShareStore* store = handler->store();
    if ((control & fz::kFixFsId) && store != nullptr && frame.size() >= wire::kHeaderBytes) {
      std::memcpy(frame.data() + fz::kFsIdOffset, store->meta().fs_id.data(), 16);
    }
    if ((control & fz::kFixLength) && frame.size() >= wire::kHeaderBytes) {
      const auto body = static_cast<std::uint32_t>(frame.size() - wire::kHeaderBytes);
      for (int i = 0; i < 4; ++i) frame[fz::kLengthOffset + i] = static_cast<std::uint8_t>(body >> (8 * i));
    }
    if (TooCostly(frame)) continue;

    env.peers.mode = static_cast<fz::PeerMode>(control & fz::kPeerModeMask);
    env.peers.sends = 0;
    env.peers.bucket_elems =
        store ? std::size_t{store->meta().shape.bucket_size} * store->meta().shape.elems_per_slot
              : 0;
    const std::optional<ServerMeta> before =
        store ? std::optional<ServerMeta>(store->meta()) : std::nullopt;
    // A quick read as the serving loop answers it (from the state the last
    // request left), then as the worker does: both well-formed answers.
    if (RequestHandler::IsQuickRead(frame)) {
      if (const auto quick = handler->AnswerQuickRead(frame)) {
        CheckReply(frame, *quick, *handler, env.peers);
      }
    }
    const auto reply = handler->Handle(frame);
    CheckReply(frame, reply, *handler, env.peers);
    if (env.verbose) PrintExchange(frame, reply);

    auto req = wire::Decode(frame);
    // INIT and REBUILD_BEGIN replace the store (a new identity, counters
    // from the request): the invariants below hold for every other request.
    const bool is_init = req.ok() && (std::holds_alternative<wire::InitRequest>(req->body) ||
                                      std::holds_alternative<wire::RebuildBeginRequest>(req->body));
    if (is_init || !before) continue;
    const ShareStore* after = handler->store();
    if (after == nullptr) Fail("a request other than INIT dropped the store");
    const ServerMeta& a = after->meta();
    if (a.fs_id != before->fs_id || !(a.shape == before->shape) ||
        a.server_index != before->server_index) {
      Fail("a request other than INIT changed the store's identity or shape");
    }
    if (a.epoch < before->epoch || a.applied_seq < before->applied_seq ||
        a.applied_evictions < before->applied_evictions) {
      Fail("a request moved the store's epoch, seq or evictions backwards");
    }
    const auto r = wire::Decode(reply);
    if (std::holds_alternative<wire::ErrorReply>(r->body) && !SameMeta(a, *before)) {
      Fail("a refused request changed the store's meta");
    }
  }

  // Restart: what is on disk must be what the handler believed.
  const ShareStore* last = handler->store();
  // A store still being rebuilt in full is not on disk as shares.bin: the
  // server restarts empty (and the rebuild must be run again). One being
  // caught up in place restarts still marked, with the meta it had (the
  // state it is caught up from), serving nothing until a catch-up ends.
  const bool rebuilding = last != nullptr && last->rebuilding();
  const bool catching_up = last != nullptr && last->catching_up();
  const std::optional<ServerMeta> meta =
      last && (!rebuilding || catching_up) ? std::optional<ServerMeta>(last->meta()) : std::nullopt;
  const std::uint64_t sealed = last ? last->shadow().SealedEviction() : 0;
  handler.reset();
  auto reopened = NewHandler(env);
  if (rebuilding && !catching_up && reopened->store() != nullptr) {
    Fail("after a restart in the middle of a rebuild the store is live");
  }
  if (catching_up && (reopened->store() == nullptr || !reopened->store()->catching_up())) {
    Fail("after a restart in the middle of a catch-up the store is not marked");
  }
  if (meta) {
    const ShareStore* s = reopened->store();
    if (s == nullptr) Fail("after a restart the store is gone");
    if (!SameMeta(s->meta(), *meta)) Fail("after a restart the store's meta differs");
    if (s->shadow().SealedEviction() != sealed) Fail("after a restart the sealed eviction differs");
  }
  return 0;
}

// One pipelined chunk of accesses: AccessPath::RunChunk and its steps
// (access_path.h).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <string>
#include <variant>

#include "oramcore/base/fault_point.h"
#include "oramcore/base/random.h"
#include "oramcore/base/time_into.h"
#include "oramcore/math/field.h"
#include "oramcore/math/shamir.h"
#include "oramcore/protocol/access_path.h"
#include "oramcore/protocol/fresh_shares.h"

namespace s3oram {

using field::Elem;

// One pipelined chunk of accesses as RunChunk's steps see it: what each step
// leaves for the next. Plan (where each block is) → BuildRetrievals (the
// select and root shares) → SendRetrievals (one pipelined exchange, the root
// writes it carried recorded) → FinishAccess for each access in order
// (recover and authenticate, re-seal, log the root write) → RecordChunk (one
// durable transaction, then memory) → EndRoundIfFull.
struct AccessPath::Chunk {
  // Where access j finds its block, decided before anything is sent.
  struct Plan {
    std::optional<PositionEntry> where;         // its copy on the servers (as they will be)
    std::optional<std::size_t> repeat_of;       // an earlier item of this chunk
    std::optional<std::vector<Elem>> own_copy;  // served from the client's copy
    std::uint64_t own_version = 0;              // the version own_copy is sealed under
    LeafId leaf = 0;                            // the path retrieved
    bool blind = false;  // a whole write of a quarantined block: its old copy is not read
    // Whether the retrieval selects the block on its path (else it selects
    // nothing on a random one, which looks the same to a server).
    bool reads() const { return where && !repeat_of && !own_copy && !blind; }
  };
  // What a finished access left, for a later item of the chunk on the same block.
  struct Done {
    bool mapped = false;        // it left the block in the tree
    std::uint64_t version = 0;  // under this version
    std::vector<std::uint8_t> stored;
  };

  std::span<const BatchItem> items;  // the first k are this chunk's accesses
  std::size_t q = 0;                 // root writes pending when it began
  std::uint64_t base = 0;            // the root slot its first access writes
  std::size_t k = 0;
  std::vector<Plan> plans;
  std::vector<ServerSet::Outgoing> requests;
  std::vector<LeafId> revealed;  // the path each retrieval revealed (0: a random one)
  std::vector<Outcome> outcomes;
  // Request j's replies, one per server (nullopt: that server lags on it,
  // with more than 2t + 1 servers), or why it failed.
  std::vector<Result<std::vector<std::optional<wire::Message>>>> replies;
  std::vector<RootWriteQueue::LagNote> lags;  // request j's seq and the servers lagging on it
  // Resends happened: a pipelined answer that does not authenticate may be
  // garbage (a retrieval resent after a later root write), not a lie.
  bool resent = false;
  // The state transaction: the carried root writes, then each access.
  Counters next;
  ClientStateStore::Batch batch;
  std::size_t carried = 0;  // pending root writes every server acknowledged
  std::vector<std::optional<Done>> done;
  std::vector<RootWriteQueue::Entry> roots;
  std::vector<Result<std::vector<std::uint8_t>>> results;
  Status chunk_error;    // why the chunk stopped early
  Status first_refusal;  // why an access failed, for a quarantine
  std::size_t finished = 0;
};

Status AccessPath::RunChunk(std::span<const BatchItem> items,
                            std::vector<Result<std::vector<std::uint8_t>>>& out) {
  S3ORAM_RETURN_IF_ERROR(BeforeChunk());
  Chunk c;
  c.items = items;
  c.q = roots_.size();
  c.base = session_.counters().nr + c.q;
  c.k = static_cast<std::size_t>(
      std::min<std::uint64_t>({items.size(), kMaxPipelined, params().evict_rate - c.base}));
  // Paced as the last of them would be alone: the accesses before it whose
  // root writes the servers acknowledged, or will with this chunk.
  evictor_.Pace(c.base + c.k - 1 - (c.q > 0 ? 1 : 0), c.base);
  S3ORAM_RETURN_IF_ERROR(PlanChunk(c));
  S3ORAM_RETURN_IF_ERROR(BuildRetrievals(c));
  SendRetrievals(c);
  for (std::size_t j = 0; j < c.k; ++j, ++c.finished) {
    if (FinishAccess(c, j) == AccessEnd::kStopChunk) break;
  }
  S3ORAM_RETURN_IF_ERROR(RecordChunk(c, out));
  if (!c.chunk_error.ok()) return c.chunk_error;
  EndRoundIfFull(items[c.finished == 0 ? 0 : c.finished - 1].id);
  return Status::Ok();
}

Status AccessPath::BeforeChunk() {
  const OramParams& p = params();
  // A server found lying or damaged by the last chunk is left out first.
  S3ORAM_RETURN_IF_ERROR(session_.ExcludeSuspects().status());
  // What lagging servers answered since; a root write one of them failed is
  // written again on every server before anything reads the root.
  S3ORAM_RETURN_IF_ERROR(roots_.SettleLagging(/*wait=*/false));
  // A deferred root write in the root's last slot goes alone (an earlier
  // flush before the eviction failed), and an eviction left pending by an
  // earlier failure must finish first: the root has no free slot until then.
  if (roots_.fills_root()) S3ORAM_RETURN_IF_ERROR(roots_.Flush());
  if (session_.counters().nr >= p.evict_rate) {
    TimeInto timer(stats_.timings.eviction_ns);
    S3ORAM_RETURN_IF_ERROR(evictor_.RunEviction());
  }
  // No root write of this round before every server copied the last round's
  // root aside for the eviction in flight.
  if (evictor_.in_flight() != nullptr && !evictor_.started()) {
    TimeInto timer(stats_.timings.eviction_ns);
    S3ORAM_RETURN_IF_ERROR(evictor_.EnsureStarted());
  }
  // Root slots from nr on may hold inconsistent sharings (an Open, a failed
  // root write): rewritten before the first retrieval reads them.
  S3ORAM_RETURN_IF_ERROR(roots_.PrepareRetrievals());
  return Status::Ok();
}

Status AccessPath::PlanChunk(Chunk& c) {
  for (bool planned = false; !planned;) {
    c.plans.assign(c.k, Chunk::Plan{});
    planned = true;
    for (std::size_t j = 0; j < c.k && planned; ++j) {
      S3ORAM_ASSIGN_OR_RETURN(planned, PlanAccess(c, j));
    }
  }
  return Status::Ok();
}

Result<bool> AccessPath::PlanAccess(Chunk& c, std::size_t j) {
  const BlockId id = c.items[j].id;
  Chunk::Plan& pl = c.plans[j];
  for (std::size_t i = j; i-- > 0;) {
    if (c.items[i].id == id) {
      pl.repeat_of = i;
      return true;
    }
  }
  const bool quarantined = !quarantined_.empty() && quarantined_.count(id) != 0;
  // Its newest copy may be a pending root write: retrieval x carries
  // pending write x, and a server applies it before its retrieval and
  // handles a connection's requests in order, so retrievals from x on
  // find it in its root slot; earlier ones do not, and the client's own
  // copy serves them.
  if (const std::optional<std::size_t> newest = roots_.NewestOf(id)) {
    const RootWriteQueue::Entry& r = roots_[*newest];
    if (*newest <= j) {
      pl.where = r.moved;
      pl.blind = quarantined;
    } else {
      pl.own_copy = r.elems;
      pl.own_version = r.moved.version;
    }
    return true;
  }
  const PositionEntry* at = pm_.Find(id);
  if (at) pl.where = *at;
  pl.blind = at && quarantined;
  const EvictionRecord* in_flight = evictor_.in_flight();
  if (!at || in_flight == nullptr) return true;
  // A block the eviction in flight moves is still where it was on the
  // servers (they commit the eviction at the end of this round); one it
  // takes out of a root slot this round may have overwritten is read
  // from the client's own copy, behind a retrieval that selects nothing.
  const auto bt = in_flight->before.find(id);
  if (bt == in_flight->before.end()) return true;
  pl.where = PositionEntry{bt->second, at->version};
  // Slots this round wrote, and those this chunk's retrievals may
  // rewrite first (the pending ones; slot nr after a repair).
  const std::uint64_t overwritten = session_.counters().nr + std::max<std::size_t>(c.q, 1);
  if (bt->second.level != 0 || bt->second.slot >= overwritten) return true;
  pl.own_copy = RootCopyOf(id, *pl.where);
  pl.own_version = at->version;
  if (pl.own_copy) return true;
  // No usable copy (lost in a power failure, or written by another
  // process): the block is only in the eviction's result. Commit it now (a
  // server sees this one commit early) and plan again.
  if (!early_commit_logged_) {
    spdlog::info(
        "block {} is only in eviction {}'s result (no copy in {}): the eviction commits early", id,
        in_flight->eviction, root_copies_ ? root_copies_->path() : std::string("the root copies"));
    early_commit_logged_ = true;
  }
  TimeInto timer(stats_.timings.eviction_ns);
  S3ORAM_RETURN_IF_ERROR(evictor_.FinishInFlight());
  return false;
}

std::optional<std::vector<Elem>> AccessPath::RootCopyOf(BlockId id, const PositionEntry& at) const {
  const EvictionRecord* in_flight = evictor_.in_flight();
  if (root_copies_ == nullptr || in_flight == nullptr) return std::nullopt;
  const OramParams& p = params();
  auto copy = root_copies_->Get(RootCopies::Index(in_flight->eviction, at.pos.slot, p.evict_rate));
  if (!copy) return std::nullopt;
  std::vector<std::uint8_t> plain(p.block_bytes);
  if (!session_.codec().Open(id, at.version, *copy, plain)) return std::nullopt;
  return copy;
}

Status AccessPath::BuildRetrievals(Chunk& c) {
  // Retrieval j: fresh random select shares of its path (an all-zero
  // select over a random path where the block is not read from the
  // servers: that looks exactly like a real one), carrying pending root
  // write j afresh shared.
  const OramParams& p = params();
  const TreeGeometry geo = p.geometry();
  const std::size_t n = geo.path_slots();
  S3ORAM_ASSIGN_OR_RETURN(std::vector<wire::Header> headers, session_.NextMutationHeaders(c.k));
  c.requests.assign(c.k, ServerSet::Outgoing{});
  c.revealed.assign(c.k, 0);
  TimeInto timer(stats_.timings.client_compute_ns);
  // The seeded participant gets the seeds of its shares (fresh_shares.h).
  const std::size_t seeded_party = session_.seeded_party();
  std::vector<std::vector<Elem>> select_shares(p.parties), root_shares(p.parties);
  wire::ShareSeed select_seed, root_seed;
  for (std::size_t j = 0; j < c.k; ++j) {
    Chunk::Plan& pl = c.plans[j];
    std::vector<Elem> select(n, 0);
    if (pl.reads()) {
      pl.leaf = pl.where->pos.leaf;
      select[std::size_t{pl.where->pos.level} * p.bucket_size + pl.where->pos.slot] = 1;
      c.revealed[j] = pl.leaf;
    } else {
      pl.leaf = geo.first_leaf() + random::Below(geo.num_leaves());
    }
    ShareVectorSeeded(select, p.threshold, select_shares, select_seed, seeded_party);
    const bool carries = j < c.q;
    if (carries) {
      ShareVectorSeeded(roots_[j].elems, p.threshold, root_shares, root_seed, seeded_party);
    }
    ServerSet::Outgoing& o = c.requests[j];
    o.header = headers[j];
    o.expected_reply = wire::MessageType::kRetrieveReply;
    for (std::size_t i : session_.participants()) {
      const bool seeded = i == seeded_party;
      if (carries) {
        o.frames.push_back(wire::Encode(
            headers[j], wire::Body{wire::RetrieveWriteRootRequest{
                            roots_[j].slot, std::move(root_shares[i]), pl.leaf,
                            std::move(select_shares[i]), seeded ? root_seed : wire::ShareSeed{},
                            seeded ? select_seed : wire::ShareSeed{}}}));
      } else {
        o.frames.push_back(wire::Encode(
            headers[j],
            wire::Body{wire::RetrieveRequest{pl.leaf, std::move(select_shares[i]),
                                             seeded ? select_seed : wire::ShareSeed{}}}));
      }
      select_shares[i] = {};
      root_shares[i] = {};
    }
  }
  return Status::Ok();
}

void AccessPath::SendRetrievals(Chunk& c) {
  c.outcomes.assign(c.k, Outcome::kUnanswered);
  chunk_sent_ = true;
  const std::uint64_t resends_before = session_.servers().stats().resends;
  std::vector<ServerSet::Answers> answers;
  {
    TimeInto timer(stats_.timings.retrieve_wait_ns);
    const std::vector<std::size_t>& servers = session_.participants();
    std::vector<ServerSet::RequestView> views;
    for (const ServerSet::Outgoing& o : c.requests)
      views.push_back({o.header, o.expected_reply, &o.frames});
    // With more than 2t + 1 servers the first 2t + 1 answers decode a
    // retrieval: a slow server does not set the pace, it lags.
    TransportOptions options = session_.options().requests;
    const bool quorum = servers.size() > decoder_.degree() + 1;
    if (quorum) options.quorum = decoder_.degree() + 1;
    answers = session_.servers().ExchangeAnswers(
        servers, views, options, quorum ? ServerSet::Wait::kQuorum : ServerSet::Wait::kEvery);
  }
  c.lags.assign(c.k, RootWriteQueue::LagNote{});
  c.replies.clear();
  for (std::size_t j = 0; j < c.k; ++j) {
    c.lags[j].seq = c.requests[j].header.seq;
    c.replies.push_back(RepliesOf(std::move(answers[j]), c.lags[j]));
  }
  c.requests.clear();
  // A server that lost its connection and got requests again answers a
  // retrieval sent again after a later root write over a changed root: such
  // an answer is garbage, and a pipelined access that does not authenticate
  // after resends is tried again alone, not failed.
  c.resent = c.k > 1 && session_.servers().stats().resends != resends_before;

  // Every server holds the root writes the answered requests carried, up to
  // the first request that failed: they are recorded in the transaction that
  // records this chunk's accesses. From that request on, the slots the
  // pending writes go to may be inconsistent: they are rewritten before the
  // next retrieval.
  c.next = session_.counters();
  c.done.assign(c.k, std::nullopt);
  const std::size_t carrying = std::min(c.q, c.k);
  while (c.carried < carrying && c.replies[c.carried].ok()) ++c.carried;
  roots_.RecordCarried(c.carried, carrying, c.lags, c.batch, c.next);
}

Result<std::vector<std::optional<wire::Message>>> AccessPath::RepliesOf(
    ServerSet::Answers answers, RootWriteQueue::LagNote& lag) {
  // As ServerSet::ExchangeViews: the first failure by server order, except
  // that a server reporting damaged storage wins; a lagging server is none.
  // answers[k] is participant k's; replies[i] server i's (none from an
  // excluded server).
  const std::vector<std::size_t>& servers = session_.participants();
  std::vector<std::optional<wire::Message>> replies(params().parties);
  std::optional<Status> failure, silence, damaged;
  std::size_t answered = 0;
  for (std::size_t k = 0; k < answers.size(); ++k) {
    const std::size_t i = servers[k];
    if (answers[k].lagging) {
      lag.servers.push_back(i);
      stats_.lagged_answers.resize(params().parties, 0);
      ++stats_.lagged_answers[i];
      continue;
    }
    auto reply = session_.servers().ReplyOrError(i, std::move(answers[k]));
    if (reply.ok()) {
      replies[i] = std::move(reply).value();
      ++answered;
    } else if (IsSilence(reply.status())) {
      // Silent or found down: 2t + 1 others may answer without it (it then
      // missed the root write this request carried).
      lag.failed.push_back(i);
      if (!silence) silence = reply.status();
    } else if (reply.status().code() == Status::Code::kDamaged &&
               session_.NoteSuspect(i,
                                    "it reported damaged storage: " + reply.status().message())) {
      // With servers to spare it is left out before the next chunk
      // (ClientSession::ExcludeSuspects); 2t + 1 others may answer without
      // it, as without a silent one.
      lag.failed.push_back(i);
      if (!damaged) damaged = reply.status();
    } else if (!failure || (reply.status().code() == Status::Code::kDamaged &&
                            failure->code() != Status::Code::kDamaged)) {
      failure = reply.status();
    }
  }
  if (failure) return *failure;
  if (damaged && answered < decoder_.degree() + 1) return *damaged;
  if (silence && answered < decoder_.degree() + 1) return *silence;
  return replies;
}

bool AccessPath::AwaitLagging(Chunk& c, std::size_t j) {
  bool came = false;
  for (std::size_t i : c.lags[j].servers) {
    auto end = session_.servers().AwaitLagged(i, c.lags[j].seq);
    const bool reply = end.ok() && std::holds_alternative<wire::RetrieveReply>(end.value().body);
    roots_.LagEnded(i, c.lags[j].seq, reply);
    if (reply) {
      c.replies[j].value()[i] = std::move(end).value();
      came = true;
    }
  }
  c.lags[j].servers.clear();
  return came;
}

void AccessPath::KeepForLateCheck(const Chunk& c, std::size_t j,
                                  const std::vector<const Elem*>& answers,
                                  std::span<const Elem> secrets) {
  if (c.lags[j].servers.empty()) return;
  const std::size_t m = params().elems_per_slot();
  LateCheck check;
  check.answers.resize(answers.size());
  for (std::size_t i = 0; i < answers.size(); ++i) {
    if (answers[i] != nullptr) check.answers[i].assign(answers[i], answers[i] + m);
  }
  check.secrets.assign(secrets.begin(), secrets.end());
  check.awaiting = c.lags[j].servers.size();
  check.resent = c.resent;
  check.resends = session_.servers().stats().resends;
  check.id = c.items[j].id;
  late_checks_[c.lags[j].seq] = std::move(check);
}

void AccessPath::CheckLateAnswer(const ServerSet::Lagged& end) {
  const auto it = late_checks_.find(end.seq);
  if (it == late_checks_.end()) return;
  LateCheck& check = it->second;
  const std::size_t m = params().elems_per_slot();
  const wire::RetrieveReply* reply =
      end.reply.ok() ? std::get_if<wire::RetrieveReply>(&end.reply.value().body) : nullptr;
  if (reply != nullptr && reply->answer.size() == m && end.server < check.answers.size()) {
    std::vector<const Elem*> answers(check.answers.size(), nullptr);
    for (std::size_t i = 0; i < answers.size(); ++i) {
      if (!check.answers[i].empty()) answers[i] = check.answers[i].data();
    }
    answers[end.server] = reply->answer.data();
    // The secrets the first answers gave verified: the polynomial through
    // them is the right one, and an answer off it is wrong.
    std::vector<Elem> opened(m);
    const auto outcome = decoder_.Decode(
        answers, m,
        [&](std::span<const Elem> s) {
          return std::equal(s.begin(), s.end(), check.secrets.begin());
        },
        opened.data());
    if (outcome && outcome->accepted && !outcome->wrong.empty()) {
      // A resend since (its own, or a later one) may have made it an answer
      // over a changed root: counted, not named.
      NoteWrong(*outcome, check.resent || session_.servers().stats().resends != check.resends,
                check.id);
    }
  }
  if (--check.awaiting == 0) late_checks_.erase(it);
}

// One access of a chunk between its answer and its root write.
struct AccessPath::AccessWork {
  std::vector<std::uint8_t> previous;  // the block's bytes before the access
  std::vector<Elem> elems;             // the recovered slot, then the new one
  bool held = false;                   // the block had a copy before this access
  std::uint64_t old_version = 0;
  bool authentic = true;
  bool packed = true;  // the recovered data part was a valid packing
};

AccessPath::AccessEnd AccessPath::FinishAccess(Chunk& c, std::size_t j) {
  if (!c.replies[j].ok()) {
    c.chunk_error = c.replies[j].status();
    if (IsAnsweredFailure(c.chunk_error)) c.outcomes[j] = Outcome::kRefused;
    return AccessEnd::kStopChunk;
  }
  TimeInto compute(stats_.timings.client_compute_ns);
  AccessWork w;
  w.previous.assign(params().block_bytes, 0);
  const AccessEnd recovered = RecoverAccess(c, j, w);
  if (recovered != AccessEnd::kNext) return recovered;
  const BatchItem& item = c.items[j];
  // A write of the whole block does not need the old content: one that
  // does not authenticate (a block destroyed by a fault or a lying server)
  // is replaced by a fresh version all the same. The retrieval ran as for
  // any access, so the servers see the same access either way.
  const bool whole_write = item.op == AccessOp::kWrite && !item.modify;
  if (!w.authentic && c.resent) return AccessEnd::kStopChunk;  // tried again alone next
  if (!w.authentic && whole_write) {
    spdlog::warn(
        "block {} (version {}) did not authenticate; it is overwritten whole with version {}",
        item.id, w.old_version, w.old_version + 1);
    std::fill(w.previous.begin(), w.previous.end(), 0);
  } else if (!w.authentic) {
    // Nothing of this access is written or logged: the block stays where
    // it is, and the next access to it retries the same path.
    Status bad = Status::Integrity(
        "block " + std::to_string(item.id) + " (version " + std::to_string(w.old_version) +
        ") failed authentication" + (w.packed ? "" : " (not even a valid packing)") +
        ": one of the servers " + session_.ServerSetName() +
        " returned tampered, swapped or stale data, or the client state does not match them");
    spdlog::error("{}", bad.message());
    c.results.emplace_back(bad);
    c.outcomes[j] = Outcome::kRefused;
    if (c.first_refusal.ok()) c.first_refusal = bad;
    return AccessEnd::kNext;
  }
  return ResealAccess(c, j, w);
}

AccessPath::AccessEnd AccessPath::RecoverAccess(Chunk& c, std::size_t j, AccessWork& w) {
  const OramParams& p = params();
  const std::size_t m = p.elems_per_slot();
  const BlockId id = c.items[j].id;
  Chunk::Plan& pl = c.plans[j];
  if (pl.repeat_of || pl.own_copy || pl.blind) {
    if (CheckSelectsNothing(c, j) != AccessEnd::kNext) return AccessEnd::kStopChunk;
  }
  if (pl.repeat_of) {
    // What the earlier item left; it failed: this one goes in the next
    // chunk, on its own retrieval.
    if (!c.done[*pl.repeat_of]) return AccessEnd::kStopChunk;
    const Chunk::Done& d = *c.done[*pl.repeat_of];
    w.held = d.mapped;
    w.old_version = d.mapped ? d.version : 0;
    if (d.mapped) w.previous = d.stored;
    w.elems.assign(m, 0);
    return AccessEnd::kNext;
  }
  if (pl.own_copy) {
    w.elems = std::move(*pl.own_copy);
    w.held = true;
    w.old_version = pl.own_version;
  } else if (pl.blind) {
    // Nothing to read: the new version replaces the old, which stays
    // behind as an unmapped slot (the next eviction through it drops it).
    w.elems.assign(m, 0);
    w.old_version = pl.where->version;
  } else {
    const auto answers = AnswersOf(c, j);
    if (!answers) return AccessEnd::kStopChunk;
    w.elems.resize(m);
    w.held = pl.where.has_value();
    w.old_version = w.held ? pl.where->version : 0;
    // The block's copy opens under its MAC; a retrieval of a block that is
    // not in the tree selected nothing and opens to zero.
    auto decode = [&](const std::vector<const Elem*>& from) {
      return decoder_.Decode(
          from, m,
          [&](std::span<const Elem> secrets) {
            if (!w.held)
              return std::all_of(secrets.begin(), secrets.end(), [](Elem e) { return e == 0; });
            return session_.codec().Open(id, w.old_version, secrets, w.previous, &w.packed);
          },
          w.elems.data());
    };
    auto outcome = decode(*answers);
    // The first 2t + 1 did not verify: the lagging servers' answers may
    // outvote a wrong one among them.
    if ((!outcome || !outcome->accepted) && !c.lags[j].servers.empty() && AwaitLagging(c, j)) {
      const auto all = AnswersOf(c, j);
      if (!all) return AccessEnd::kStopChunk;
      outcome = decode(*all);
    }
    // Every server answered or lags (a failed one stopped the chunk before).
    w.authentic = !w.held || (outcome && outcome->accepted);
    if (outcome) NoteWrongAnswers(c, j, *outcome);
    if (outcome && outcome->accepted) KeepForLateCheck(c, j, *answers, w.elems);
    return AccessEnd::kNext;
  }
  if (w.held)
    w.authentic = session_.codec().Open(id, w.old_version, w.elems, w.previous, &w.packed);
  return AccessEnd::kNext;
}

std::optional<std::vector<const Elem*>> AccessPath::AnswersOf(Chunk& c, std::size_t j) {
  const std::size_t m = params().elems_per_slot();
  std::vector<const Elem*> answers;
  for (std::size_t i = 0; i < c.replies[j].value().size(); ++i) {
    const std::optional<wire::Message>& reply = c.replies[j].value()[i];
    if (!reply) {
      answers.push_back(nullptr);  // lagging
      continue;
    }
    const auto& ans = std::get<wire::RetrieveReply>(reply->body).answer;
    if (ans.size() != m) {
      c.chunk_error =
          Status::Protocol("server " + std::to_string(i) + " answered " +
                           std::to_string(ans.size()) + " elements, expected " + std::to_string(m));
      c.outcomes[j] = Outcome::kRefused;
      return std::nullopt;
    }
    answers.push_back(ans.data());
  }
  return answers;
}

AccessPath::AccessEnd AccessPath::CheckSelectsNothing(Chunk& c, std::size_t j) {
  // With 2t + 1 servers nothing can be said of who is wrong, and what such
  // a retrieval opens to is not used: nothing to check.
  if (session_.participants().size() <= decoder_.degree() + 1) return AccessEnd::kNext;
  const auto answers = AnswersOf(c, j);
  if (!answers) return AccessEnd::kStopChunk;
  std::vector<Elem> opened(params().elems_per_slot());
  auto decode = [&](const std::vector<const Elem*>& from) {
    return decoder_.Decode(
        from, opened.size(),
        [](std::span<const Elem> s) {
          return std::all_of(s.begin(), s.end(), [](Elem e) { return e == 0; });
        },
        opened.data());
  };
  auto outcome = decode(*answers);
  if ((!outcome || !outcome->accepted) && !c.lags[j].servers.empty() && AwaitLagging(c, j)) {
    const auto all = AnswersOf(c, j);
    if (!all) return AccessEnd::kStopChunk;
    outcome = decode(*all);
  }
  if (outcome) NoteWrongAnswers(c, j, *outcome);
  if (outcome && outcome->accepted) KeepForLateCheck(c, j, *answers, opened);
  return AccessEnd::kNext;
}

void AccessPath::NoteWrongAnswers(const Chunk& c, std::size_t j,
                                  const shamir::RobustDecoder::Outcome& o) {
  if (o.wrong.empty() || !o.accepted) return;
  NoteWrong(o, c.resent, c.items[j].id);
}

void AccessPath::NoteWrong(const shamir::RobustDecoder::Outcome& o, bool resent, BlockId id) {
  stats_.wrong_answers.resize(params().parties, 0);
  for (std::size_t i : o.wrong) ++stats_.wrong_answers[i];
  // After resends a pipelined answer may be computed over a root a later
  // root write changed: garbage, not a lie. The access used the others'.
  if (resent) {
    spdlog::debug("access to block {}: a wrong answer after resends, outvoted", id);
    return;
  }
  std::string who, used;
  for (std::size_t i : o.wrong) {
    who += (who.empty() ? "" : ", ") + std::string("server ") + std::to_string(i) + " (" +
           session_.servers().endpoint(i) + ")";
  }
  for (std::size_t i : o.used) used += (used.empty() ? "" : ", ") + std::to_string(i);
  // A server that answers wrongly is left out before the next chunk, when
  // the others suffice (ClientSession::ExcludeSuspects): it is not asked
  // again, and its share is rebuilt in full later.
  for (std::size_t i : o.wrong) {
    session_.NoteSuspect(i, "its retrieval answer for an access was wrong, outvoted by servers " +
                                used + " whose answers verify");
  }
  // One message per set of wrong servers (NoteProblem records each distinct
  // message once): the block is left out, it would make one per block.
  const Status st = Status::Integrity(
      "retrieval answers inconsistent across the servers: " + who +
      " answered wrongly, outvoted by servers " + used +
      " whose answers verify; the access returned the right bytes. That server lies or its "
      "storage is damaged: run s3oram scrub, and s3oram rebuild --server N for a server it "
      "reports");
  if (st.message() != last_wrong_answer_note_) {
    spdlog::warn("access to block {}: {}", id, st.message());
    last_wrong_answer_note_ = st.message();
  }
  session_.NoteProblem(st);
}

AccessPath::AccessEnd AccessPath::ResealAccess(Chunk& c, std::size_t j, AccessWork& w) {
  const OramParams& p = params();
  const TreeGeometry geo = p.geometry();
  const BatchItem& item = c.items[j];
  const Chunk::Plan& pl = c.plans[j];
  // What goes to the root: the new data (write), the old data changed by
  // `modify` (update) or the old (read), sealed under the next version with
  // a fresh nonce, so every rewrite looks new. A read of an unmapped block
  // writes an all-zero slot nobody will read.
  std::vector<std::uint8_t> updated;
  std::span<const std::uint8_t> data = item.data;
  if (item.modify) {
    updated = w.previous;
    (*item.modify)(updated);
    data = updated;
  }
  const bool mapped = w.held || item.op == AccessOp::kWrite;
  w.elems.assign(p.elems_per_slot(), 0);
  if (mapped) {
    session_.codec().Seal(item.id, w.old_version + 1,
                          item.op == AccessOp::kWrite ? data : w.previous, w.elems);
  }

  // This access's root write, deferred to a later request: the slot after
  // every pending one. Logged with this chunk's record, so once AccessMany
  // returns a crash cannot lose it (Open sends it).
  RootWriteQueue::Entry root;
  root.slot = static_cast<std::uint32_t>(c.base + c.roots.size());
  root.key = kPendingRootKey + root.slot;
  root.id = item.id;
  root.mapped = mapped;
  root.moved.pos = Position{geo.first_leaf() + random::Below(geo.num_leaves()), 0, root.slot};
  root.moved.version = w.old_version + 1;
  root.elems = std::move(w.elems);
  c.batch.AddPending(PendingOp{root.key, kPendingRootKind, RootWriteQueue::Encode(root)});
  // The client's own copy of the root write, before the access is
  // recorded: the next round may need it while this round's eviction is
  // in flight.
  if (root_copies_) {
    if (Status st = root_copies_->Put(
            RootCopies::Index(evictor_.current_round(), root.slot, p.evict_rate), root.elems);
        !st.ok()) {
      c.chunk_error = st;
      return AccessEnd::kStopChunk;
    }
  }
  // Ids, versions and positions only (this log stays on the client): never bytes.
  spdlog::debug("access {} block {}: version {} -> {}, root slot {}, retrieved leaf {}",
                item.modify ? "update" : (item.op == AccessOp::kWrite ? "write" : "read"), item.id,
                w.old_version, mapped ? root.moved.version : 0, root.slot,
                pl.where && !pl.own_copy && !pl.repeat_of ? pl.where->pos.leaf : 0);
  Chunk::Done d;
  d.mapped = mapped;
  d.version = root.moved.version;
  d.stored = item.modify ? updated
                         : (item.op == AccessOp::kWrite
                                ? std::vector<std::uint8_t>(item.data.begin(), item.data.end())
                                : w.previous);
  c.results.emplace_back(item.modify || item.op == AccessOp::kRead ? d.stored
                                                                   : std::move(w.previous));
  c.done[j] = std::move(d);
  c.roots.push_back(std::move(root));
  return AccessEnd::kNext;
}

Status AccessPath::RecordChunk(Chunk& c, std::vector<Result<std::vector<std::uint8_t>>>& out) {
  // One transaction records the root writes the servers acknowledged and
  // this chunk's accesses (their root writes pending). Their results reach
  // the caller only once it committed: an access that returned is one a
  // crash cannot lose.
  const std::span<const BatchItem> accesses = c.items.first(c.k);
  c.batch.SetCounters(c.next);
  if (c.carried > 0 || !c.roots.empty()) {
    TimeInto timer(stats_.timings.state_commit_ns);
    if (Status st = session_.store().Commit(c.batch, /*durable=*/true); !st.ok()) {
      // None of them happened: every path that went out is exposed.
      NoteExposures(accesses, c.revealed, std::vector<Outcome>(c.k, Outcome::kUnanswered), st);
      return st;
    }
  }
  for (std::size_t j = 0; j < c.k; ++j) {
    if (c.done[j]) c.outcomes[j] = Outcome::kCompleted;
  }
  NoteExposures(accesses, c.revealed, c.outcomes,
                c.chunk_error.ok() ? c.first_refusal : c.chunk_error);
  // The state on disk has all of it now; so must the memory, even if a
  // position does not fit the map (then this client reports the error).
  const Status applied = roots_.CarriedCommitted(c.carried, c.next);
  session_.counters() = c.next;
  for (std::size_t j = 0; j < c.finished; ++j) {
    // Taken out of the eviction in flight: its copy there is stale, its slot free.
    if (c.done[j]) evictor_.TakenOut(c.items[j].id);
  }
  for (auto& r : c.roots) roots_.Push(std::move(r));
  S3ORAM_RETURN_IF_ERROR(applied);
  for (auto& r : c.results) out.push_back(std::move(r));
  return Status::Ok();
}

void AccessPath::EndRoundIfFull(BlockId last_access) {
  if (!roots_.fills_root()) return;
  // The root's last slot: the eviction reads the whole root, so the writes
  // go now, then the eviction. The accesses themselves are recorded: their
  // results are reported. A failed flush or eviction stays due and is
  // retried (or reported) at the start of the next access.
  Status st = roots_.Flush();
  if (st.ok()) {
    TimeInto timer(stats_.timings.eviction_ns);
    st = evictor_.RunEviction();
  }
  if (!st.ok()) {
    session_.NoteProblem(st);
    spdlog::warn("eviction {} failed after access to block {}: {}", session_.counters().ne,
                 last_access, st.ToString());
  }
}

}  // namespace s3oram

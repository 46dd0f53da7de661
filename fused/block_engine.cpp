#include "fused/block_engine.h"

#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <set>
#include <thread>

#include "oramcore/base/random.h"

namespace s3oram::fs {

OramBlockEngine::OramBlockEngine(std::unique_ptr<OramClient> client, std::size_t pipeline,
                                 std::chrono::steady_clock::duration slice)
    : client_(std::move(client)),
      pipeline_(std::clamp<std::size_t>(pipeline, 1, OramClient::kMaxPipelined)),
      slicer_(pipeline_, slice, BatchSlicer::kDefaultWindow),
      writes_stopped_(client_->writes_stopped().has_value()),
      snapshot_(client_->TakeSnapshot()) {}

void OramBlockEngine::AfterCall() {
  writes_stopped_ = client_->writes_stopped().has_value();
  OramClient::Snapshot taken = client_->TakeSnapshot();
  const std::lock_guard<std::mutex> lock(snapshot_mu_);
  snapshot_ = std::move(taken);
}

OramClient::Snapshot OramBlockEngine::snapshot() const {
  const std::lock_guard<std::mutex> lock(snapshot_mu_);
  OramClient::Snapshot s = snapshot_;
  s.catching_up = catching_up_;
  if (s.catching_up) {
    s.catching_up->elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - catch_up_started_);
  }
  return s;
}

Result<std::unique_ptr<StatusProbe>> OramBlockEngine::OpenStatusProbe() {
  std::lock_guard<FairMutex> lock(mu_);
  return StatusProbe::Open(client_->session());
}

std::uint32_t OramBlockEngine::block_bytes() const {
  return static_cast<std::uint32_t>(client_->block_bytes());
}

std::uint64_t OramBlockEngine::capacity_blocks() const { return client_->params().capacity_blocks; }

void OramBlockEngine::NoteReadWait(std::chrono::steady_clock::time_point asked) {
  const auto now = std::chrono::steady_clock::now();
  const bool was = slicer_.Throttled(now);
  slicer_.NoteReadWait(now - asked, now);
  if (!was && slicer_.Throttled(now)) {
    spdlog::debug(
        "a read waited {:.1f} s for the ORAM engine: batches go in pieces of about {:.1f} s "
        "for the next {} s",
        std::chrono::duration<double>(now - asked).count(),
        std::chrono::duration<double>(slicer_.slice()).count(),
        std::chrono::duration_cast<std::chrono::seconds>(BatchSlicer::kDefaultWindow).count());
  }
}

Result<std::vector<std::uint8_t>> OramBlockEngine::ReadNow(std::uint64_t id) {
  const auto asked = std::chrono::steady_clock::now();
  std::lock_guard<FairMutex> lock(mu_);
  NoteReadWait(asked);
  // The cache reads only blocks that hold file data, and such a block always
  // has a position (valid rises only after its write-back recorded one). One
  // without is data the ORAM no longer knows (a forced restore from a backup
  // older than the servers): an error, never zeros. The access still runs
  // (as a dummy), so the servers see an ordinary access.
  const bool held = client_->Holds(id);
  auto r = client_->Read(id);
  AfterCall();
  if (r.ok() && !held) {
    r = Status::Integrity("block " + std::to_string(id) +
                          " holds file data but the ORAM has no position for it: its data are "
                          "lost (s3oram fsck names the file; fsck -y --zero-damaged lets it read "
                          "as zeros)");
  }
  last_contact_ = last_access_ = std::chrono::steady_clock::now();
  ++stats_.reads;
  if (!r.ok()) {
    ++stats_.failures;
    spdlog::error("ORAM read of block {} failed: {}", id, r.status().ToString());
  }
  return r;
}

Status OramBlockEngine::WriteNow(std::uint64_t id, std::span<const std::uint8_t> data) {
  std::lock_guard<FairMutex> lock(mu_);
  Status s = client_->Write(id, data);
  AfterCall();
  last_contact_ = last_access_ = std::chrono::steady_clock::now();
  ++stats_.writes;
  if (!s.ok()) {
    ++stats_.failures;
    spdlog::error("ORAM write of block {} failed: {}", id, s.ToString());
  }
  return s;
}

Result<std::vector<std::uint8_t>> OramBlockEngine::UpdateNow(std::uint64_t id,
                                                             const Modifier& modify) {
  std::lock_guard<FairMutex> lock(mu_);
  auto r = client_->Update(id, modify);
  AfterCall();
  last_contact_ = last_access_ = std::chrono::steady_clock::now();
  ++stats_.updates;
  if (!r.ok()) {
    ++stats_.failures;
    spdlog::error("ORAM update of block {} failed: {}", id, r.status().ToString());
  }
  return r;
}

// ---- constant rate --------------------------------------------------------

namespace {

Status Unmounting() {
  return Status::Unavailable("the filesystem is being unmounted: no more accesses");
}

}  // namespace

void OramBlockEngine::EnableConstantRate(std::chrono::steady_clock::duration period) {
  ticker_ = std::make_unique<AccessTicker>(period, [this] { return DummyAccess().sent; });
}

std::uint64_t OramBlockEngine::BytesSent() const {
  std::lock_guard<FairMutex> lock(mu_);
  return client_->transport_stats().bytes_sent;
}

bool OramBlockEngine::OnTick(const std::function<void()>& access) {
  // An exception (bad_alloc) belongs to the caller, not to the ticker thread.
  std::exception_ptr thrown;
  const AccessTicker::Job job = [this, &access, &thrown] {
    const std::uint64_t before = BytesSent();
    try {
      access();
    } catch (...) {
      thrown = std::current_exception();
    }
    return BytesSent() != before;
  };
  const bool ran = ticker_->Run(job);
  if (thrown) std::rethrow_exception(thrown);
  return ran;
}

OramBlockEngine::DummyOutcome OramBlockEngine::DummyAccess() {
  std::lock_guard<FairMutex> lock(mu_);
  const std::uint64_t before = client_->transport_stats().bytes_sent;
  // A read of a random block: one that holds data is rewritten unchanged
  // (a fresh sealing under the next version, as every access does); one
  // that never held any writes an all-zero slot and stays unmapped. Either
  // is an ordinary access to the servers.
  const std::uint64_t id = random::Below(client_->params().capacity_blocks);
  auto r = client_->Read(id);
  AfterCall();
  last_contact_ = last_access_ = std::chrono::steady_clock::now();
  if (r.ok()) {
    sodium_memzero(r->data(), r->size());  // file data nobody asked for
  } else {
    spdlog::debug("dummy access (block {}) failed: {}", id, r.status().ToString());
  }
  return {client_->transport_stats().bytes_sent != before, r.status()};
}

Result<std::vector<std::uint8_t>> OramBlockEngine::Read(std::uint64_t id) {
  if (!ticker_) return ReadNow(id);
  Result<std::vector<std::uint8_t>> r = Unmounting();
  OnTick([&] { r = ReadNow(id); });
  return r;
}

Status OramBlockEngine::Write(std::uint64_t id, std::span<const std::uint8_t> data) {
  if (!ticker_) return WriteNow(id, data);
  Status s = Unmounting();
  OnTick([&] { s = WriteNow(id, data); });
  return s;
}

Result<std::vector<std::uint8_t>> OramBlockEngine::Update(std::uint64_t id,
                                                          const Modifier& modify) {
  if (!ticker_) return UpdateNow(id, modify);
  Result<std::vector<std::uint8_t>> r = Unmounting();
  OnTick([&] { r = UpdateNow(id, modify); });
  return r;
}

std::size_t OramBlockEngine::max_batch() const { return ticker_ ? 1 : pipeline_; }

void OramBlockEngine::StopTicker() {
  if (ticker_) ticker_->Stop();
}

std::optional<AccessTicker::Stats> OramBlockEngine::ticker_stats() const {
  if (!ticker_) return std::nullopt;
  return ticker_->stats();
}

// ---- batches --------------------------------------------------------------

std::vector<Result<std::vector<std::uint8_t>>> OramBlockEngine::Batch(std::span<const Op> ops) {
  // At a constant rate: one operation per tick, nothing pipelined.
  if (ticker_) return BlockEngine::Batch(ops);
  const auto asked = std::chrono::steady_clock::now();
  std::unique_lock<FairMutex> lock(mu_);
  if (std::any_of(ops.begin(), ops.end(),
                  [](const Op& op) { return op.kind == Op::Kind::kRead; })) {
    NoteReadWait(asked);
  }
  std::vector<OramClient::BatchItem> items;
  std::vector<bool> held;
  items.reserve(ops.size());
  for (const Op& op : ops) {
    OramClient::BatchItem it;
    it.id = op.id;
    it.op = op.kind == Op::Kind::kRead ? AccessOp::kRead : AccessOp::kWrite;
    if (op.kind == Op::Kind::kWrite) it.data = op.data;
    if (op.kind == Op::Kind::kUpdate) it.modify = op.modify;
    items.push_back(it);
    held.push_back(client_->Holds(op.id));
  }
  // Pieces sized by the slicer; between them a read that waits goes first
  // (the FIFO lock admits it before this thread takes the lock again).
  // A piece is measured by the items it took (what was left at its gate
  // less what is left at the next), not by what the gate allowed: a chunk
  // may hold fewer (the root's last slots, an access tried again alone).
  std::optional<std::chrono::steady_clock::time_point> piece_started;
  std::size_t left_at_start = 0;
  const auto end_piece = [&](std::size_t remaining, std::chrono::steady_clock::time_point now) {
    if (!piece_started || remaining >= left_at_start) return;
    slicer_.NotePiece(left_at_start - remaining, now - *piece_started);
    ++stats_.pieces;
    last_contact_ = now;  // the servers heard from this mount (KeepAlive)
  };
  const auto gate = [&](std::size_t remaining) {
    auto now = std::chrono::steady_clock::now();
    end_piece(remaining, now);
    if (piece_started && mu_.waiters() > 0) {
      lock.unlock();
      lock.lock();
      now = std::chrono::steady_clock::now();
    }
    piece_started = now;
    left_at_start = remaining;
    return slicer_.NextPiece(remaining, now);
  };
  auto results = client_->AccessMany(items, gate);
  end_piece(0, std::chrono::steady_clock::now());
  AfterCall();
  last_contact_ = last_access_ = std::chrono::steady_clock::now();
  std::set<std::uint64_t> written;  // by an earlier operation of this batch
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    auto& r = results[i];
    const char* what = "read";
    if (op.kind == Op::Kind::kRead) {
      ++stats_.reads;
      // As Read: a block that holds file data has a position.
      if (r.ok() && !held[i] && !written.count(op.id)) {
        r = Status::Integrity("block " + std::to_string(op.id) +
                              " holds file data but the ORAM has no position for it: its data "
                              "are lost (s3oram fsck names the file; fsck -y --zero-damaged lets "
                              "it read as zeros)");
      }
    } else if (op.kind == Op::Kind::kWrite) {
      ++stats_.writes;
      what = "write";
      if (r.ok()) r = std::vector<std::uint8_t>{};
    } else {
      ++stats_.updates;
      what = "update";
    }
    if (r.ok() && op.kind != Op::Kind::kRead) written.insert(op.id);
    if (!r.ok()) {
      ++stats_.failures;
      // The servers unreachable fail every later access of the batch with
      // the same status after one wait: one line for all of them.
      std::size_t same = 0;
      while (i + 1 + same < ops.size() && !results[i + 1 + same].ok() &&
             results[i + 1 + same].status().ToString() == r.status().ToString()) {
        ++same;
      }
      if (same == 0) {
        spdlog::error("ORAM {} of block {} failed: {}", what, op.id, r.status().ToString());
      } else {
        spdlog::error("ORAM {} of block {} and {} more of its batch failed: {}", what, op.id, same,
                      r.status().ToString());
        for (std::size_t k = 1; k <= same; ++k) {
          const Op& o = ops[i + k];
          ++(o.kind == Op::Kind::kRead    ? stats_.reads
             : o.kind == Op::Kind::kWrite ? stats_.writes
                                          : stats_.updates);
          ++stats_.failures;
        }
        i += same;
      }
    }
  }
  return results;
}

Status OramBlockEngine::Sync() {
  if (ticker_) {
    // The latest access's root write goes out with the next access, never
    // alone: this tick's dummy access carries it (a complete access has
    // written every earlier root write). Then, after the tick, so that its
    // length does not depend on the fsync, the state is synced with the
    // dummy's own root write recorded in it. If no dummy access completed,
    // the root write may not be on the servers: the fsync fails.
    Status s = Unmounting();
    OnTick([&] {
      for (int attempt = 0; attempt < kDummyAttempts; ++attempt) {
        const DummyOutcome d = DummyAccess();
        s = d.status;
        if (d.sent) return;  // a refused block sends nothing: another one
      }
      if (s.ok()) s = Status::Unavailable("no dummy access could be sent");
    });
    if (s.ok()) {
      std::lock_guard<FairMutex> lock(mu_);
      s = client_->SyncKeepingLatestRootWrite();
      AfterCall();
    }
    if (!s.ok()) spdlog::error("syncing the client state failed: {}", s.ToString());
    return s;
  }
  std::lock_guard<FairMutex> lock(mu_);
  Status s = client_->Sync();
  AfterCall();
  if (!s.ok()) spdlog::error("syncing the client state failed: {}", s.ToString());
  return s;
}

Status OramBlockEngine::KeepAlive(std::chrono::steady_clock::duration idle) {
  std::lock_guard<FairMutex> lock(mu_);
  if (client_->fenced()) return Status::LeaseHeld("fenced off");
  // The ticks keep the lease alive; a renewal would be a message outside
  // the schedule.
  if (ticker_) return Status::Ok();
  if (std::chrono::steady_clock::now() - last_contact_ < idle) return Status::Ok();
  Status s = client_->RenewLease();
  AfterCall();
  last_contact_ = std::chrono::steady_clock::now();
  if (!s.ok() && s.code() != Status::Code::kLeaseHeld) {
    spdlog::warn("renewing the lease failed: {}", s.ToString());
  }
  return s;
}

void OramBlockEngine::CatchUpExcluded() {
  std::vector<std::size_t> excluded;
  wire::FsId fs_id{};
  {
    std::lock_guard<FairMutex> lock(mu_);
    if (client_->fenced() || client_->session().read_only()) return;
    for (const Exclusion& e : client_->session().store().exclusions()) {
      // Excluded for what it answered: only a full rebuild takes it back.
      if (e.suspect) {
        if (catch_up_noted_[e.server].empty()) {
          catch_up_noted_[e.server] = "suspect";
          spdlog::warn(
              "excluded server {} is not caught up: it was excluded for what it answered ({}); "
              "rebuild it in full: unmount, then s3oram rebuild --server {}",
              e.server, e.reason, e.server);
        }
        continue;
      }
      excluded.push_back(e.server);
    }
    if (excluded.empty()) return;
    fs_id = client_->config().fs_id;
    if (!catch_up_probe_) {
      auto probe = StatusProbe::Open(client_->session());
      if (!probe.ok()) {
        spdlog::warn("cannot probe the excluded servers: {}", probe.status().ToString());
        return;
      }
      catch_up_probe_ = std::move(probe).value();
    }
  }
  auto note = [this](std::size_t server, const std::string& what, bool warn) {
    auto& last = catch_up_noted_[server];
    if (last == what) return;
    last = what;
    if (warn) {
      spdlog::warn("{}", what);
    } else {
      spdlog::info("{}", what);
    }
  };
  for (std::size_t k : excluded) {
    // A short question, on the probe's connection: a server still down
    // costs this thread the timeout and the accesses nothing.
    auto reply = catch_up_probe_->StatusOf(k, std::chrono::milliseconds(2000));
    if (!reply.ok()) {
      note(k,
           "excluded server " + std::to_string(k) + " is still unreachable; it is caught up " +
               "when it answers again",
           false);
      continue;
    }
    const auto& st = std::get<wire::StatusReply>(reply->body);
    // Rebuilding: caught up in place when a catch-up of it was cut off, and
    // begun again here (CatchUpRun::Start; a server rebuilt in full refuses).
    if ((!st.initialized && !st.rebuilding) || reply->header.fs_id != fs_id) {
      note(k,
           "excluded server " + std::to_string(k) +
               " answers again but holds no store of this filesystem to catch up (it lost its "
               "data); it must be rebuilt in full: unmount, then s3oram rebuild --server " +
               std::to_string(k),
           true);
      continue;
    }
    CatchUpOne(k, note);
  }
}

void OramBlockEngine::CatchUpOne(
    std::size_t k, const std::function<void(std::size_t, const std::string&, bool)>& note) {
  auto failed = [&](const Status& st) {
    {
      const std::lock_guard<std::mutex> shown(snapshot_mu_);
      catching_up_.reset();
    }
    note(k, "catching up excluded server " + std::to_string(k) + " failed: " + st.ToString(), true);
  };
  std::unique_ptr<CatchUpRun> run;
  {
    std::lock_guard<FairMutex> lock(mu_);
    {
      const std::lock_guard<std::mutex> shown(snapshot_mu_);
      catching_up_ = OramClient::Snapshot::CatchUp{k, 0, 0, {}};
      catch_up_started_ = std::chrono::steady_clock::now();
    }
    auto started = client_->StartCatchUp(k, [this](std::uint64_t done, std::uint64_t total) {
      const std::lock_guard<std::mutex> shown(snapshot_mu_);
      if (catching_up_) {
        catching_up_->done_bytes = done;
        catching_up_->total_bytes = total;
      }
    });
    AfterCall();
    if (!started.ok()) {
      // A participant between two evictions: the next beat tries again.
      if (started.status().code() == Status::Code::kUnavailable) {
        const std::lock_guard<std::mutex> shown(snapshot_mu_);
        catching_up_.reset();
        return;
      }
      failed(started.status());
      return;
    }
    run = std::move(started).value();
  }
  // The copy: the engine is held for one range at a time, so the accesses
  // go on between the ranges (a FairMutex lets those waiting go first).
  // An eviction's commit under way on a participant is waited out, up to
  // kStepRetries times in a row.
  for (int unavailable = 0; !catch_up_hurry_.load();) {
    Status st;
    bool copied = false;
    {
      std::lock_guard<FairMutex> lock(mu_);
      auto step = client_->CatchUpStep(*run);
      AfterCall();
      if (step.ok()) {
        copied = *step;
      } else {
        st = step.status();
      }
    }
    if (st.ok() && copied) break;
    if (st.ok()) {
      unavailable = 0;
    } else if (st.code() != Status::Code::kUnavailable || ++unavailable >= kStepRetries) {
      failed(st);
      return;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    // The steps send nothing that keeps the lease alive.
    if (KeepAlive(std::chrono::seconds(10)).code() == Status::Code::kLeaseHeld) {
      failed(Status::LeaseHeld("fenced off during the catch-up"));
      return;
    }
  }
  // The last pass settles the eviction under way first, which the accesses
  // would otherwise not wait for: on a busy mount with one running, wait
  // for a moment without one, but not for more than kCatchUpPatience
  // seconds (nor at an unmount), copying what the evictions meanwhile make
  // stale. An idle mount (no access for 2 s) has nobody waiting.
  const auto copied_at = std::chrono::steady_clock::now();
  while (true) {
    bool sent = false;
    {
      std::lock_guard<FairMutex> lock(mu_);
      const auto now = std::chrono::steady_clock::now();
      const bool busy = now - last_access_ < std::chrono::seconds(2);
      auto pending = client_->PendingEviction();
      if (!busy || !pending.ok() || !pending->has_value() ||
          now - copied_at >= std::chrono::seconds(kCatchUpPatience) || catch_up_hurry_.load()) {
        auto report = client_->FinishCatchUp(*run);
        {
          const std::lock_guard<std::mutex> shown(snapshot_mu_);
          catching_up_.reset();
        }
        AfterCall();
        last_contact_ = std::chrono::steady_clock::now();
        if (report.ok()) {
          catch_up_noted_.erase(k);
        } else {
          failed(report.status());
        }
        return;
      }
      auto step = client_->CatchUpStep(*run);
      AfterCall();
      // A step refused here (a commit under way) is tried again; the last
      // pass sends what it would have.
      sent = step.ok() && !*step;
    }
    if (!sent) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

void OramBlockEngine::HurryCatchUp() { catch_up_hurry_ = true; }

Status OramBlockEngine::Close() {
  StopTicker();
  std::lock_guard<FairMutex> lock(mu_);
  return client_->Close();
}

Result<BackupResult> OramBlockEngine::BackupState() {
  StopTicker();  // the backup is the end of the mount (unmount)
  std::lock_guard<FairMutex> lock(mu_);
  S3ORAM_ASSIGN_OR_RETURN(BackupResult r, s3oram::BackupState(*client_));
  // The mount holds the state: nothing changed it since the snapshot, so it
  // now equals this generation (what a later refresh elsewhere relies on).
  S3ORAM_RETURN_IF_ERROR(client_->RecordBackup(r.generation, r.epoch)
                             .WithContext("recording backup generation " +
                                          std::to_string(r.generation) + " in the state"));
  AfterCall();
  return r;
}

OramBlockEngine::Stats OramBlockEngine::stats() const {
  std::lock_guard<FairMutex> lock(mu_);
  return stats_;
}

}  // namespace s3oram::fs

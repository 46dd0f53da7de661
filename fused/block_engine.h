// BlockEngine: where the filesystem's fixed-size data blocks live.
//
// Blocks have ids [0, capacity_blocks()) and exactly block_bytes() bytes; a
// block never written reads as some block_bytes() of data (the filesystem
// never reads one it has not written: see BlockMapping::valid). Every call
// is complete when it returns: a successful Write survives a crash of this
// process, and Sync() makes every earlier Write survive a power loss.
// Implementations are thread-safe (they may serialise).
#pragma once

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "fused/access_ticker.h"
#include "fused/batch_slicer.h"
#include "fused/fair_mutex.h"
#include "oramcore/base/status.h"
#include "oramcore/protocol/client.h"
#include "oramcore/protocol/state_backup.h"
#include "oramcore/protocol/status_probe.h"

namespace s3oram::fs {

// The errno a failed engine write or sync reports to the filesystem: ENOSPC
// when a server's disk is full (retrying after space is freed succeeds),
// EIO for everything else.
inline int WriteErrno(const Status& s) {
  if (s.ok()) return 0;
  return s.code() == Status::Code::kNoSpace ? ENOSPC : EIO;
}

class BlockEngine {
 public:
  virtual ~BlockEngine() = default;
  virtual std::uint32_t block_bytes() const = 0;
  virtual std::uint64_t capacity_blocks() const = 0;
  virtual Result<std::vector<std::uint8_t>> Read(std::uint64_t id) = 0;
  virtual Status Write(std::uint64_t id, std::span<const std::uint8_t> data) = 0;
  // Read-modify-write as one operation (one ORAM access): `modify` changes
  // the block's bytes in place (as Read would return them) and the result is
  // stored as Write would store it; returns the stored bytes. On failure
  // nothing was stored.
  using Modifier = std::function<void(std::span<std::uint8_t>)>;
  virtual Result<std::vector<std::uint8_t>> Update(std::uint64_t id, const Modifier& modify) = 0;
  // Several operations in order, as Read, Write or Update would perform them
  // one after the other (an operation on a block an earlier one changed
  // sees that change); an engine may overlap them (pipelining). results[i]
  // is operation i's: the block read or stored, empty for a write.
  struct Op {
    enum class Kind { kRead, kWrite, kUpdate } kind = Kind::kRead;
    std::uint64_t id = 0;
    std::span<const std::uint8_t> data;  // kWrite
    const Modifier* modify = nullptr;    // kUpdate
  };
  virtual std::vector<Result<std::vector<std::uint8_t>>> Batch(std::span<const Op> ops) {
    std::vector<Result<std::vector<std::uint8_t>>> out;
    for (const Op& op : ops) {
      switch (op.kind) {
        case Op::Kind::kRead:
          out.push_back(Read(op.id));
          break;
        case Op::Kind::kWrite: {
          const Status s = Write(op.id, op.data);
          out.push_back(s.ok() ? Result<std::vector<std::uint8_t>>(std::vector<std::uint8_t>{})
                               : Result<std::vector<std::uint8_t>>(s));
          break;
        }
        case Op::Kind::kUpdate:
          out.push_back(Update(op.id, *op.modify));
          break;
      }
    }
    return out;
  }
  // How many operations a Batch overlaps at most (1: none).
  virtual std::size_t max_batch() const { return 1; }
  virtual Status Sync() = 0;
  // True once the engine refuses every Write and Update until the storage
  // is repaired (a fail-stop after damage); reads may still work.
  virtual bool WritesStopped() const { return false; }
};

// The S3ORAM client as a BlockEngine: one ORAM access per Read, Write or Update, one
// call at a time (OramClient is single-threaded; callers queue on a mutex, so
// concurrent FUSE requests are served in arrival order); a Batch's accesses
// are pipelined.
class OramBlockEngine final : public BlockEngine {
 public:
  // `pipeline`: the most accesses a Batch sends together (1..kMaxPipelined).
  // `slice`: a read that waits this long or longer makes batches go in
  // pieces of about this long for a while (batch_slicer.h; zero: any read).
  explicit OramBlockEngine(std::unique_ptr<OramClient> client,
                           std::size_t pipeline = OramClient::kMaxPipelined,
                           std::chrono::steady_clock::duration slice = BatchSlicer::kDefaultSlice);
  std::uint32_t block_bytes() const override;
  std::uint64_t capacity_blocks() const override;
  Result<std::vector<std::uint8_t>> Read(std::uint64_t id) override;
  Status Write(std::uint64_t id, std::span<const std::uint8_t> data) override;
  Result<std::vector<std::uint8_t>> Update(std::uint64_t id, const Modifier& modify) override;
  // OramClient::AccessMany: up to OramClient::kMaxPipelined accesses in
  // flight together.
  std::vector<Result<std::vector<std::uint8_t>>> Batch(std::span<const Op> ops) override;
  std::size_t max_batch() const override;
  Status Sync() override;

  // Constant-rate mode (-o constant_rate=MS; access_ticker.h): from now on
  // every access happens on a tick of `period`, a dummy one when no caller
  // waits, one operation per tick (max_batch() is 1), Sync sends nothing of
  // its own and KeepAlive nothing at all. Call once, before the first
  // access. The ticks stop at BackupState or Close (the unmount); accesses
  // asked for after that fail with kUnavailable.
  void EnableConstantRate(std::chrono::steady_clock::duration period);
  // The ticker's counters; nullopt when not at a constant rate.
  std::optional<AccessTicker::Stats> ticker_stats() const;
  // Callers waiting for the engine now (for tests and diagnostics).
  std::uint64_t waiters() const { return mu_.waiters(); }
  // Since when the call under way (an access, a batch's piece, a sync, an
  // eviction it runs) has held the engine; nullopt when none runs.
  std::optional<std::chrono::steady_clock::time_point> busy_since() const {
    return mu_.held_since();
  }
  // OramClient::writes_stopped(), read without waiting for an access.
  bool WritesStopped() const override { return writes_stopped_.load(); }
  // Tells the servers this mount is alive unless an access did so within
  // `idle` (the lease's "last active"); kLeaseHeld once fenced off.
  Status KeepAlive(std::chrono::steady_clock::duration idle);
  // For the keep-alive thread, every few seconds while a server is
  // excluded: asks each excluded server, on a probe's own connection and
  // without holding the engine, whether it is back with its store of this
  // filesystem, and catches up each that is (OramClient::StartCatchUp and
  // its steps). The copy holds the engine one range at a time, so the
  // accesses go on beside it; the last pass (what changed meanwhile, the
  // root) holds it throughout. That pass settles the eviction under way
  // first, so on a busy mount it waits for a moment with none running, at
  // most kCatchUpPatience seconds. Logs each new finding about a server
  // once (still down, back without a store, caught up).
  void CatchUpExcluded();
  // Makes a catch-up under way skip to its last pass (an unmount: the
  // keep-alive thread is stopping). The server would otherwise be left
  // marked as being caught up, and only a full rebuild takes it back.
  void HurryCatchUp();
  // Releases the lease (clean unmount); later calls fail.
  Status Close();
  // The client's own state as of the latest call that finished
  // (OramClient::TakeSnapshot), read without waiting for the access or
  // eviction under way: what the mount's `s3oram status` shows.
  OramClient::Snapshot snapshot() const;
  // OramClient::ServersDown(), read without waiting for the call under way.
  std::vector<std::optional<ServerDown>> servers_down() const { return client_->ServersDown(); }
  // A StatusProbe on the client's servers (connections of its own, usable
  // beside the accesses).
  Result<std::unique_ptr<StatusProbe>> OpenStatusProbe();

  struct Stats {
    std::uint64_t reads = 0;
    std::uint64_t writes = 0;
    std::uint64_t updates = 0;
    std::uint64_t failures = 0;
    std::uint64_t pieces = 0;  // pipelined chunks the batches ran in
  };
  Stats stats() const;

  // Backs the client state up to the servers (oramcore/protocol/state_backup.h) under
  // the engine's lock, so no access runs during the snapshot.
  Result<BackupResult> BackupState();

 private:
  Result<std::vector<std::uint8_t>> ReadNow(std::uint64_t id);
  Status WriteNow(std::uint64_t id, std::span<const std::uint8_t> data);
  Result<std::vector<std::uint8_t>> UpdateNow(std::uint64_t id, const Modifier& modify);
  // Runs `access` (one operation) on the next free tick; false if the
  // ticks have stopped (then it did not run).
  bool OnTick(const std::function<void()>& access);
  // The idle tick's access: a read of a random block, its data dropped.
  // `sent`: anything went to the servers (a block refused before its
  // access, e.g. quarantined, sends nothing); `status`: the access's.
  struct DummyOutcome {
    bool sent = false;
    Status status;
  };
  DummyOutcome DummyAccess();
  static constexpr int kDummyAttempts = 4;
  std::uint64_t BytesSent() const;
  void StopTicker();

  // Under mu_: a read that waited a slice or longer makes later batches go
  // in pieces (see batch_slicer.h).
  void NoteReadWait(std::chrono::steady_clock::time_point asked);
  // Under mu_, after every call into the client: mirrors what is read
  // without the lock (writes_stopped_, snapshot_).
  void AfterCall();

  mutable FairMutex mu_;  // FIFO: a read waits for the batches ahead of it only
  std::unique_ptr<OramClient> client_;
  const std::size_t pipeline_;
  BatchSlicer slicer_;  // under mu_
  Stats stats_;
  std::atomic<bool> writes_stopped_{false};  // mirrors client_->writes_stopped() after each call
  mutable std::mutex snapshot_mu_;           // never held while waiting for mu_
  OramClient::Snapshot snapshot_;            // under snapshot_mu_; taken by AfterCall
  // The catch-up under way, if any (under snapshot_mu_; snapshot() adds it).
  std::optional<OramClient::Snapshot::CatchUp> catching_up_;
  std::chrono::steady_clock::time_point catch_up_started_{};
  std::chrono::steady_clock::time_point last_contact_ = std::chrono::steady_clock::now();
  // The last access a caller asked for (not a keep-alive): idle since then.
  std::chrono::steady_clock::time_point last_access_ = std::chrono::steady_clock::now();
  std::unique_ptr<AccessTicker> ticker_;  // constant-rate mode only; set before any access
  // CatchUpExcluded's (the keep-alive thread's only): its probe, and what
  // it last logged of each server.
  std::unique_ptr<StatusProbe> catch_up_probe_;
  std::map<std::size_t, std::string> catch_up_noted_;
  std::atomic<bool> catch_up_hurry_{false};
  static constexpr int kCatchUpPatience = 30;  // seconds
  static constexpr int kStepRetries = 50;      // of 200 ms each
  void CatchUpOne(std::size_t k,
                  const std::function<void(std::size_t, const std::string&, bool)>& note);
};

}  // namespace s3oram::fs

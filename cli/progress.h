// A progress report for long operations (rebuild, fsck, backup and restore,
// large inits): on a terminal, one redrawn line with a bar, the rate and an
// ETA; otherwise (a log, a pipe, CI) a plain line at most every `plain_every`
// and one at the end, so logs stay readable. Writes only to `out` (stderr by
// default), never to stdout, which stays free for a command's results.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

namespace s3oram::cli {

class Progress {
 public:
  enum class Unit { kItems, kBytes };
  // `total` may be 0 when unknown (no bar, no ETA). A TTY is detected on
  // `out`'s descriptor; force_plain chooses the plain lines anyway.
  Progress(std::string label, std::uint64_t total, Unit unit, std::FILE* out = stderr,
           bool force_plain = false,
           std::chrono::milliseconds plain_every = std::chrono::seconds(5));
  ~Progress();  // Finish() if not done yet
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Sets the amount done so far (monotone; larger than total is clamped).
  void Update(std::uint64_t done);
  void Add(std::uint64_t delta) { Update(done_ + delta); }
  // Final line ("done" and the mean rate), once.
  void Finish();

  // Rendering, exposed for tests: the line for `done` after `elapsed`.
  static std::string Render(const std::string& label, std::uint64_t done, std::uint64_t total,
                            Unit unit, std::chrono::duration<double> elapsed, bool bar);

 private:
  void Draw(bool final);

  using Clock = std::chrono::steady_clock;
  std::string label_;
  std::uint64_t total_;
  Unit unit_;
  std::FILE* out_;
  bool tty_;
  std::chrono::milliseconds plain_every_;
  Clock::time_point start_;
  Clock::time_point last_draw_;
  std::uint64_t done_ = 0;
  bool finished_ = false;
};

// A (done, total) byte callback for a transfer (backup, restore) that
// creates the Progress in `holder` only once the total is known to be large:
// smaller transfers take well under a second and print nothing. The caller
// calls holder->Finish() (if set) when the transfer ends.
inline constexpr std::uint64_t kProgressFromBytes = std::uint64_t{16} << 20;
std::function<void(std::uint64_t, std::uint64_t)> TransferProgress(
    const std::string& label, std::unique_ptr<Progress>& holder);

}  // namespace s3oram::cli

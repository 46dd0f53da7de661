#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "cli/commands.h"

namespace s3oram::cli {

namespace {

std::string Amount(double v, Progress::Unit unit) {
  if (unit == Progress::Unit::kBytes) return HumanBytes(v);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::string Duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  }
  return buf;
}

}  // namespace

Progress::Progress(std::string label, std::uint64_t total, Unit unit, std::FILE* out,
                   bool force_plain, std::chrono::milliseconds plain_every)
    : label_(std::move(label)),
      total_(total),
      unit_(unit),
      out_(out),
      tty_(!force_plain && ::isatty(::fileno(out)) == 1),
      plain_every_(plain_every),
      start_(Clock::now()),
      last_draw_(start_) {}

Progress::~Progress() { Finish(); }

std::string Progress::Render(const std::string& label, std::uint64_t done, std::uint64_t total,
                             Unit unit, std::chrono::duration<double> elapsed, bool bar) {
  const double secs = std::max(elapsed.count(), 1e-6);
  const double rate = static_cast<double>(done) / secs;
  std::string line = label + ": ";
  if (total > 0) {
    const double frac = std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
    if (bar) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(frac * kWidth);
      line += "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "] ";
    }
    char pct[16];
    std::snprintf(pct, sizeof pct, "%3.0f%%", frac * 100);
    line += pct;
    line += " " + Amount(static_cast<double>(done), unit) + "/" +
            Amount(static_cast<double>(total), unit);
  } else {
    line += Amount(static_cast<double>(done), unit);
  }
  line += ", " + Amount(rate, unit) + "/s";
  if (total > 0 && done < total) {
    line += ", ETA " + (rate > 0 ? Duration(static_cast<double>(total - done) / rate) : "?");
  }
  return line;
}

void Progress::Update(std::uint64_t done) {
  if (finished_) return;
  if (total_ > 0) done = std::min(done, total_);
  done_ = std::max(done_, done);
  const auto now = Clock::now();
  const auto since = now - last_draw_;
  if (tty_ ? since >= std::chrono::milliseconds(100) : since >= plain_every_) Draw(false);
}

void Progress::Finish() {
  if (finished_) return;
  Draw(true);
  finished_ = true;
}

void Progress::Draw(bool final) {
  last_draw_ = Clock::now();
  std::string line = Render(label_, done_, total_, unit_, last_draw_ - start_, tty_);
  if (final) line += " (done in " + Duration(std::chrono::duration<double>(last_draw_ - start_).count()) + ")";
  if (tty_) {
    std::fprintf(out_, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

std::function<void(std::uint64_t, std::uint64_t)> TransferProgress(
    const std::string& label, std::unique_ptr<Progress>& holder) {
  return [&holder, label](std::uint64_t done, std::uint64_t total) {
    if (!holder) {
      if (total < kProgressFromBytes) return;
      holder = std::make_unique<Progress>(label, total, Progress::Unit::kBytes);
    }
    holder->Update(done);
  };
}

}  // namespace s3oram::cli

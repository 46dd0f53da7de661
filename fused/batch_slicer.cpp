#include "fused/batch_slicer.h"

#include <algorithm>

namespace s3oram::fs {

BatchSlicer::BatchSlicer(std::size_t pipeline, Clock::duration slice, Clock::duration window)
    : pipeline_(std::max<std::size_t>(1, pipeline)), slice_(slice), window_(window) {}

void BatchSlicer::NoteReadWait(Clock::duration waited, Clock::time_point now) {
  if (waited >= slice_) throttled_until_ = std::max(throttled_until_, now + window_);
}

void BatchSlicer::NotePiece(std::size_t accesses, Clock::duration took) {
  if (accesses == 0 || took < Clock::duration::zero()) return;
  const Clock::duration each = took / static_cast<Clock::rep>(accesses);
  // The first measurement is taken whole; later ones weigh a quarter, so
  // one slow piece (an eviction's end) does not halve the next ones.
  per_access_ = per_access_ == Clock::duration::zero() ? each : (3 * per_access_ + each) / 4;
}

std::size_t BatchSlicer::NextPiece(std::size_t remaining, Clock::time_point now) const {
  const std::size_t whole = std::min(remaining, pipeline_);
  if (whole <= 1 || !Throttled(now) || per_access_ <= Clock::duration::zero()) return whole;
  const auto fit = static_cast<std::size_t>(slice_ / per_access_);
  return std::clamp<std::size_t>(fit, 1, whole);
}

}  // namespace s3oram::fs

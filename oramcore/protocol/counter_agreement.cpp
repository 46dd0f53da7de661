#include "oramcore/protocol/counter_agreement.h"

#include <algorithm>

#include "oramcore/protocol/freshness.h"

namespace s3oram {

AdoptedCounter AdoptCounter(std::span<const std::uint64_t> reports, std::uint64_t floor,
                            std::size_t t) {
  AdoptedCounter c;
  c.agreed = std::max(floor, AgreedAtLeast(reports, t + 1));
  c.value = c.agreed;
  // Saturating: an agreed value near the end of the range has no room above.
  const std::uint64_t ceiling =
      c.agreed > UINT64_MAX - kMaxCounterLead ? UINT64_MAX : c.agreed + kMaxCounterLead;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    if (reports[i] > ceiling) {
      c.outliers.push_back(i);
    } else {
      c.value = std::max(c.value, reports[i]);
    }
  }
  return c;
}

Status CounterOutlierError(const AdoptedCounter& c, std::span<const std::uint64_t> reports,
                           std::size_t t, const std::string& what,
                           const std::function<std::string(std::size_t)>& name) {
  if (c.outliers.empty()) return Status::Ok();
  const std::size_t i = c.outliers.front();
  return Status::FailedPrecondition(name(i) + " reports " + what + " " +
                                    std::to_string(reports[i]) + ", but " + std::to_string(t + 1) +
                                    " servers (or this client's state) agree only on " +
                                    std::to_string(c.agreed) +
                                    ": that server's record is damaged or forged, and its value is "
                                    "not adopted; repair it with s3oram rebuild --server " +
                                    std::to_string(i) + " --force");
}

Result<std::uint64_t> NextAgreedCounter(std::span<const std::uint64_t> reports, std::uint64_t floor,
                                        std::size_t t, const std::string& what,
                                        const std::function<std::string(std::size_t)>& name) {
  const AdoptedCounter c = AdoptCounter(reports, floor, t);
  S3ORAM_RETURN_IF_ERROR(CounterOutlierError(c, reports, t, what, name));
  if (c.value == UINT64_MAX) {
    return Status::FailedPrecondition(
        std::to_string(t + 1) + " servers report " + what +
        " 2^64-1, the last value there is: no new one can be taken. More than t = " +
        std::to_string(t) +
        " servers are damaged or forged; restore them from a backup of "
        "their data directories");
  }
  return c.value + 1;
}

}  // namespace s3oram

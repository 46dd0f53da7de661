#include "oramcore/wire/share_seeds.h"

#include <algorithm>
#include <string>
#include <variant>

#include "oramcore/base/random.h"
#include "oramcore/math/seed_stream.h"

namespace s3oram::wire {

namespace {

// The stream's nonce: every share seed is fresh, so one constant nonce,
// distinct from the rebuild masks' (which carry a bucket number).
constexpr std::array<std::uint8_t, kStreamNonceBytes> kShareSeedNonce = {
    's', '3', 'o', 'r', 'a', 'm', ' ', 's', 'h', 'a', 'r', 'e', ' ', 's', 'e', 'e', 'd'};

Status Expand(ShareSeed& seed, std::vector<Elem>& elems, const char* field) {
  if (seed.count == 0) {
    if (std::any_of(seed.seed.begin(), seed.seed.end(), [](std::uint8_t b) { return b != 0; })) {
      return Status::InvalidArgument(std::string(field) + ": a seed without a count");
    }
    return Status::Ok();
  }
  if (!elems.empty()) {
    return Status::InvalidArgument(std::string(field) + ": both elements and a seed");
  }
  if (seed.count > kMaxElems) {
    return Status::InvalidArgument(std::string(field) + ": a seed of " +
                                   std::to_string(seed.count) + " elements, more than " +
                                   std::to_string(kMaxElems));
  }
  elems = ExpandShareSeed(seed);
  seed = ShareSeed{};
  return Status::Ok();
}

}  // namespace

ShareSeed NewShareSeed(std::uint32_t count) {
  ShareSeed s;
  random::Bytes(s.seed);
  s.count = count;
  return s;
}

std::vector<Elem> ExpandShareSeed(const ShareSeed& seed) {
  std::vector<Elem> out(seed.count);
  ElemsFromSeed(seed.seed, kShareSeedNonce, out);
  return out;
}

Status ExpandShareSeeds(Message& m) {
  if (auto* r = std::get_if<RetrieveRequest>(&m.body)) {
    return Expand(r->select_seed, r->select, "select");
  }
  if (auto* w = std::get_if<WriteRootRequest>(&m.body)) {
    return Expand(w->share_seed, w->share, "share");
  }
  if (auto* rw = std::get_if<RetrieveWriteRootRequest>(&m.body)) {
    S3ORAM_RETURN_IF_ERROR(Expand(rw->share_seed, rw->share, "share"));
    return Expand(rw->select_seed, rw->select, "select");
  }
  if (auto* e = std::get_if<EvictPrepareRequest>(&m.body)) {
    return Expand(e->matrices_seed, e->matrices, "matrices");
  }
  return Status::Ok();
}

}  // namespace s3oram::wire

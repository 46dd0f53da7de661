// libFuzzer harness: the wire decoder (oramcore/wire/wire.h) on arbitrary bytes.
//
// Feeds: the input as one frame to wire::Decode.
// Asserts (abort on violation):
//   * Decode either fails with Status::Corruption (its documented error) or
//     returns a message whose header type matches its body;
//   * encoding is canonical: Encode(Decode(x)) == x byte for byte (the decoder
//     rejects trailing bytes, non-canonical elements, booleans other than 0/1
//     and over-long strings, so every accepted frame has one encoding);
//   * round trip: Decode(Encode(m)) succeeds and re-encodes to the same bytes,
//     with the same header;
//   * an ErrorReply converts to a non-OK Status (StatusFromError).
// ASan/UBSan catch any out-of-bounds read or undefined behaviour on the way.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <variant>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/wire/wire.h"

namespace {

using s3oram::Status;
namespace wire = s3oram::wire;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "wire_decode_fuzz: %s\n", what);
  std::abort();
}

bool SameHeader(const wire::Header& a, const wire::Header& b) {
  return a.type == b.type && a.fs_id == b.fs_id && a.epoch == b.epoch && a.seq == b.seq;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> frame(data, size);
  auto decoded = wire::Decode(frame);
  if (!decoded.ok()) {
    if (decoded.status().code() != Status::Code::kCorruption) {
      Fail("Decode failed with a code other than Corruption");
    }
    return 0;
  }
  const wire::Message& m = *decoded;
  if (m.header.type != wire::TypeOf(m.body)) Fail("header type does not match the body");

  const std::vector<std::uint8_t> encoded = wire::Encode(m.header, m.body);
  if (encoded.size() != size ||
      (size != 0 && !std::equal(encoded.begin(), encoded.end(), data))) {
    Fail("Encode(Decode(frame)) differs from the frame: encoding is not canonical");
  }
  auto again = wire::Decode(encoded);
  if (!again.ok()) Fail("a frame produced by Encode does not decode");
  if (!SameHeader(again->header, m.header)) Fail("round trip changed the header");
  if (wire::Encode(again->header, again->body) != encoded) Fail("round trip changed the body");

  if (const auto* e = std::get_if<wire::ErrorReply>(&m.body)) {
    if (wire::StatusFromError(*e).ok()) Fail("an ErrorReply converted to an OK status");
  }
  return 0;
}

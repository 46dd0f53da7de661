// libFuzzer harness: the s3oram-serverd TOML configuration loader
// (serverd/config.h, ParseServerConfig) on arbitrary text.
//
// Feeds: the input bytes as the configuration text.
// Asserts (abort on violation):
//   * ParseServerConfig returns a config or an InvalidArgument error (no other
//     code, and no exception: toml++ errors are caught inside the loader);
//   * an accepted config survives RenderServerConfig: parsing the rendered text
//     succeeds and gives an equal config, and rendering that again gives the
//     same text (so what the local-cluster tool writes is always readable).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "oramcore/base/status.h"
#include "serverd/config.h"

namespace {

using s3oram::Status;
namespace serverd = s3oram::serverd;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "server_config_fuzz: %s\n%s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = serverd::ParseServerConfig(text, "<fuzz>");
  if (!parsed.ok()) {
    if (parsed.status().code() != Status::Code::kInvalidArgument) {
      Fail("ParseServerConfig failed with a code other than InvalidArgument",
           parsed.status().ToString());
    }
    return 0;
  }
  const std::string rendered = serverd::RenderServerConfig(*parsed);
  auto reparsed = serverd::ParseServerConfig(rendered, "<rendered>");
  if (!reparsed.ok()) {
    Fail("the rendering of an accepted config does not parse",
         reparsed.status().ToString() + "\n--- rendered:\n" + rendered);
  }
  if (!(*reparsed == *parsed)) Fail("render + parse changed the config", rendered);
  if (serverd::RenderServerConfig(*reparsed) != rendered) {
    Fail("rendering is not a fixed point", rendered);
  }
  return 0;
}

#include "serverd/lie.h"

#include <cstdlib>
#include <string>

namespace s3oram::serverd {

bool Lies(const char* kind) {
  static const std::string kinds = [] {
    const char* env = std::getenv("S3ORAM_LIE");
    return "," + std::string(env ? env : "") + ",";
  }();
  return kinds.find("," + std::string(kind) + ",") != std::string::npos;
}

}  // namespace s3oram::serverd

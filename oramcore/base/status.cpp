#include "oramcore/base/status.h"

namespace s3oram {

const char* Status::CodeName(Code c) {
  switch (c) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kCorruption: return "corruption";
    case Code::kIoError: return "I/O error";
    case Code::kNotFound: return "not found";
    case Code::kAlreadyExists: return "already exists";
    case Code::kUnavailable: return "unavailable";
    case Code::kOverflow: return "bucket overflow";
    case Code::kFailedPrecondition: return "failed precondition";
    case Code::kProtocol: return "protocol error";
    case Code::kIntegrity: return "integrity check failed";
    case Code::kPermissionDenied: return "permission denied";
    case Code::kLeaseHeld: return "filesystem in use";
    case Code::kNoSpace: return "no space on server";
    case Code::kStaleState: return "stale state";
    case Code::kDamaged: return "damaged storage";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

}  // namespace s3oram

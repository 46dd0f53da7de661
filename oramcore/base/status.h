// Status and Result<T>: how every fallible operation in s3oram reports failure.
//
// A Status is either OK or carries a code and a human-readable message that is
// safe to log (it never contains key material or plaintext). Result<T> holds a
// value or a non-OK Status. Modelled on LevelDB's Status.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace s3oram {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,   // caller passed something unusable (bad parameter, bad option)
    kCorruption,        // stored or received data failed a check (malformed message, bad CRC)
    kIoError,           // the OS refused a read, write, fsync, open ...
    kNotFound,          // a file, key or block that must exist does not
    kAlreadyExists,     // refusing to overwrite
    kUnavailable,       // a server did not answer in time; retrying may help
    kOverflow,          // an eviction would overflow a bucket (parameters too small)
    kFailedPrecondition,// state does not allow the operation (wrong epoch, not initialised)
    kProtocol,          // a peer answered with something the protocol does not allow
    kIntegrity,         // data failed authentication (tampered, swapped or rolled back)
    kPermissionDenied,  // wrong passphrase or key; a key file readable by others
    kLeaseHeld,         // another client holds the filesystem's single-writer lease (or took it over)
    kNoSpace,           // a server's disk is full
    kStaleState,        // another client used the filesystem since this state file was last used
    kDamaged,           // a server's stored data failed its digest: that server needs repair (rebuild)
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
  static Status Corruption(std::string m) { return Status(Code::kCorruption, std::move(m)); }
  static Status IoError(std::string m) { return Status(Code::kIoError, std::move(m)); }
  static Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
  static Status AlreadyExists(std::string m) { return Status(Code::kAlreadyExists, std::move(m)); }
  static Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
  static Status Overflow(std::string m) { return Status(Code::kOverflow, std::move(m)); }
  static Status FailedPrecondition(std::string m) {
    return Status(Code::kFailedPrecondition, std::move(m));
  }
  static Status Protocol(std::string m) { return Status(Code::kProtocol, std::move(m)); }
  static Status Integrity(std::string m) { return Status(Code::kIntegrity, std::move(m)); }
  static Status PermissionDenied(std::string m) {
    return Status(Code::kPermissionDenied, std::move(m));
  }
  static Status LeaseHeld(std::string m) { return Status(Code::kLeaseHeld, std::move(m)); }
  static Status NoSpace(std::string m) { return Status(Code::kNoSpace, std::move(m)); }
  static Status StaleState(std::string m) { return Status(Code::kStaleState, std::move(m)); }
  static Status Damaged(std::string m) { return Status(Code::kDamaged, std::move(m)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;
  static const char* CodeName(Code c);

  // Prefixes the message with context ("reading share file: " + message).
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  Status(Code c, std::string m) : code_(c), message_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result built from an OK Status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace s3oram

// Early-return helpers.
#define S3ORAM_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::s3oram::Status _s3_status = (expr);       \
    if (!_s3_status.ok()) return _s3_status;    \
  } while (0)

#define S3ORAM_CONCAT_INNER(a, b) a##b
#define S3ORAM_CONCAT(a, b) S3ORAM_CONCAT_INNER(a, b)
#define S3ORAM_ASSIGN_OR_RETURN(lhs, expr) \
  S3ORAM_ASSIGN_OR_RETURN_IMPL(S3ORAM_CONCAT(_s3_result_, __LINE__), lhs, expr)
#define S3ORAM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

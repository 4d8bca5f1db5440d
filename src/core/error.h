// Error types thrown inside mmrt. Each carries a code chosen by what the caller should do next
// (retry, fix the input, give up), mapped 1:1 to HTTP statuses by the server.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace mmrt {

enum class ErrorCode {
  kInvalidArgument,     // the caller's input is wrong (400)
  kNotFound,            // a named file/tensor/model does not exist (404)
  kFormat,              // a file exists but its content is malformed (422)
  kFailedPrecondition,  // the system is not in a state to do this; fix first (412)
  kResourceExhausted,   // over a configured limit (413/429)
  kUnavailable,         // transient; retry later (503)
  kUnimplemented,       // a valid request for something not supported (501)
  kInternal,            // a bug in mmrt (500)
};

std::string_view error_code_name(ErrorCode code);
// "<code name>: <message>", e.g. "invalid_argument: ...".
std::string with_code(ErrorCode code, const std::string& message);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

#define MMRT_DEFINE_ERROR(Name, Code)                                  \
  class Name : public Error {                                          \
   public:                                                             \
    explicit Name(const std::string& m) : Error(ErrorCode::Code, m) {} \
  };
MMRT_DEFINE_ERROR(InvalidArgument, kInvalidArgument)
MMRT_DEFINE_ERROR(NotFound, kNotFound)
MMRT_DEFINE_ERROR(FormatError, kFormat)
MMRT_DEFINE_ERROR(FailedPrecondition, kFailedPrecondition)
MMRT_DEFINE_ERROR(ResourceExhausted, kResourceExhausted)
MMRT_DEFINE_ERROR(Unavailable, kUnavailable)
MMRT_DEFINE_ERROR(Unimplemented, kUnimplemented)
MMRT_DEFINE_ERROR(InternalError, kInternal)
#undef MMRT_DEFINE_ERROR

// Throws InternalError with file:line when an internal invariant fails (never for user input).
#define MMRT_CHECK(cond, msg)                                                              \
  do {                                                                                     \
    if (!(cond))                                                                           \
      throw ::mmrt::InternalError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                  ": check failed: " #cond ": " + (msg));                  \
  } while (0)

}  // namespace mmrt

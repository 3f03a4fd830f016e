// orbit::Error — the one exception type for misuse and bad input (docs/ARCHITECTURE.md §8).
//
// An expected outcome (a full pool, a patch miss, an admission refusal) is a value: see status.h.
// A broken contract or bad input (a corrupt file, a shape that disagrees with the config, a position
// past the model's limit) throws orbit::Error. The message names the file, field or argument at fault;
// the source location of the check is kept apart so messages stay readable and tests can match them.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace orbit {

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const char* source_file, int source_line)
      : std::runtime_error(message), source_(std::string(source_file) + ":" + std::to_string(source_line)) {}
  // Another message for the check at `source` ("file.cpp:123", as source() gives it): an error passed on with
  // more said before it keeps where it was raised.
  Error(const std::string& message, std::string source) : std::runtime_error(message), source_(std::move(source)) {}

  // "file.cpp:123" of the check that threw, for bug reports; not part of what().
  const std::string& source() const noexcept { return source_; }

 private:
  std::string source_;
};

// A call refused for a limit of the model or the window (tokens past the model's positions), thrown where the
// call returns a value rather than a Result: what a Result's StatusCode::kRefused says elsewhere. Python raises
// it as RefusedError.
class RefusedError : public Error {
 public:
  using Error::Error;
};

namespace detail {
// Builds a message from stream insertions: ORBIT_FAIL("file " << path << ": field 'x' missing").
class MessageBuilder {
 public:
  template <typename T>
  MessageBuilder& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }
  std::string str() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
};
}  // namespace detail

}  // namespace orbit

// Throws orbit::Error with a streamed message.
#define ORBIT_FAIL(message_stream) \
  throw ::orbit::Error((::orbit::detail::MessageBuilder() << message_stream).str(), __FILE__, __LINE__)

// Throws orbit::RefusedError with the streamed message when `condition` is false.
#define ORBIT_REFUSE_UNLESS(condition, message_stream)                                                              \
  do {                                                                                                              \
    if (!(condition))                                                                                               \
      throw ::orbit::RefusedError((::orbit::detail::MessageBuilder() << message_stream).str(), __FILE__, __LINE__); \
  } while (false)

// Throws orbit::Error with the streamed message when `condition` is false.
#define ORBIT_CHECK(condition, message_stream)    \
  do {                                            \
    if (!(condition)) ORBIT_FAIL(message_stream); \
  } while (false)

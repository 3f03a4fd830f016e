// The process-wide warning sink (orbit/common/warn.h).
#include "orbit/common/warn.h"

#include <cstdio>
#include <mutex>
#include <utility>

namespace orbit {

namespace {
struct SinkSlot {
  std::mutex mu;
  WarningSink sink;
};

SinkSlot& slot() {
  static SinkSlot* s = new SinkSlot;  // never destroyed: warnings may come from threads still running at exit
  return *s;
}
}  // namespace

void warn(std::string_view message) {
  SinkSlot& s = slot();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.sink) {
    try {
      s.sink(std::string(message));
      return;
    } catch (...) {  // a failing sink must not turn a warning into an error; say it on stderr instead
    }
  }
  std::fprintf(stderr, "orbit: warning: %.*s\n", static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
}

WarningSink set_warning_sink(WarningSink sink) {
  SinkSlot& s = slot();
  std::lock_guard<std::mutex> lock(s.mu);
  std::swap(s.sink, sink);
  return sink;
}

}  // namespace orbit

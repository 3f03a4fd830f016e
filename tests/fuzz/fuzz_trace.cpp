// libFuzzer target for orbit-trace/1 files: parse_trace (what load_trace and orbit.load_trace run on a
// file's text) must either accept the bytes or throw orbit::Error. An accepted trace must survive a round
// trip: trace_to_json's text parses again and serializes to the same text (save_trace writes that text,
// so a trace that did not read back would be a file orbit wrote but cannot load).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "orbit/common/error.h"
#include "orbit/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  orbit::Trace trace;
  try {
    trace = orbit::parse_trace(text, "fuzz.json");
  } catch (const orbit::Error&) {
    return 0;  // refused with a message: the outcome for almost every input
  }
  const std::string written = orbit::trace_to_json(trace);
  std::string rewritten;
  try {
    rewritten = orbit::trace_to_json(orbit::parse_trace(written, "fuzz.json (written back)"));
  } catch (const orbit::Error&) {
    std::abort();  // an accepted trace, once saved, no longer loads
  }
  if (rewritten != written) std::abort();
  return 0;
}

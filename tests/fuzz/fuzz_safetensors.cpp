// libFuzzer target for the safetensors header parser: any byte string must either parse into a header
// whose invariants hold or throw orbit::Error. Anything else (a crash, a sanitizer report, another
// exception type, a broken invariant) is a bug. See README.md for how to run it.
#include "orbit/runtime/safetensors.h"

#include "orbit/common/error.h"

#include <cstdint>
#include <cstdlib>

using orbit::runtime::StHeader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  StHeader header;
  try {
    header = orbit::runtime::parse_safetensors(data, size, "fuzz-input");
  } catch (const orbit::Error&) {
    return 0;  // rejected with a message: the expected outcome for almost every input
  }
  // Accepted: re-check what the parser promises, so a validation gap shows up as a crash.
  const uint64_t data_size = size - header.data_offset;
  if (header.data_offset < 8 || header.data_offset > size) std::abort();
  uint64_t furthest_end = 0;
  for (const auto& t : header.tensors) {
    const uint64_t numel = static_cast<uint64_t>(t.numel());
    if (t.begin > t.end || t.end > data_size) std::abort();
    if (t.end - t.begin != numel * orbit::runtime::st_dtype_size(t.dtype)) std::abort();
    if (t.begin != t.end) {
      if (t.begin < furthest_end) std::abort();  // sorted by offset and not overlapping
      furthest_end = t.end;
    }
  }
  return 0;
}

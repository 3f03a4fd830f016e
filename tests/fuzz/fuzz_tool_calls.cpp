// libFuzzer target for reading tool calls out of a model's text (parse_tool_calls, orbit/tool_calls.h): what
// `orbit serve` and Python's generate run on every answer that may hold calls. The first byte picks the
// format; the rest is the answer. Parsing never throws. Read whole (CutToolCall::kContent), every call has a
// name and arguments that are a JSON object; read as cut (kCall), so does every call but a cut last one,
// whose name is not empty, and a text that is no cut call reads the same both ways. Read as a forced call
// (kForcedCall), a text kCall reads calls in reads the same, and any other that is not blank is one cut call
// with no name and no arguments. Names and arguments of valid UTF-8 text are valid UTF-8 (the server writes
// them into JSON). A ToolCallReader fed the text in pieces (their sizes taken from the text's bytes) reads
// after each what kCall reads of the text so far, and the calls it says are complete stay as they are.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orbit/tool_calls.h"
#include "text/json_spans.h"

namespace {

bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

bool whole(const orbit::ChatToolCall& c) {
  if (c.name.empty()) return false;
  const nlohmann::json args = nlohmann::json::parse(c.arguments, nullptr, false);
  return args.is_object();
}

void check(const orbit::ToolCallParse& r, bool utf8) {
  for (std::size_t i = 0; i < r.calls.size(); ++i) {
    const bool last_cut = r.cut && i + 1 == r.calls.size();
    if (last_cut ? r.calls[i].name.empty() : !whole(r.calls[i])) std::abort();
    if (utf8 && (!valid_utf8(r.calls[i].name) || !valid_utf8(r.calls[i].arguments))) std::abort();
  }
  if (r.cut && r.calls.empty()) std::abort();
  if (r.cut && r.malformed) std::abort();
}

bool same(const orbit::ToolCallParse& a, const orbit::ToolCallParse& b) {
  if (a.content != b.content || a.calls.size() != b.calls.size() || a.malformed != b.malformed) return false;
  for (std::size_t i = 0; i < a.calls.size(); ++i) {
    if (a.calls[i].name != b.calls[i].name || a.calls[i].arguments != b.calls[i].arguments) return false;
  }
  return true;
}

// parse_tool_calls(text, format, kForcedCall) against the same text read with kCall.
void check_forced(const std::string& text, const orbit::ToolCallParse& cut, const orbit::ToolCallParse& forced) {
  if (!cut.calls.empty() || orbit::json_spans::trim(text).empty()) {
    if (!same(cut, forced) || cut.cut != forced.cut) std::abort();
    return;
  }
  if (forced.calls.size() != 1 || !forced.cut || forced.malformed || !forced.content.empty()) std::abort();
  if (!forced.calls[0].name.empty() || !forced.calls[0].arguments.empty()) std::abort();
}

// A reading with what a caller holds of the last call's arguments (ToolCallHeld) against the reading
// without: the held bytes and what it gives are those arguments, and under the number held, of those and
// the held ones the shorter is a prefix of the longer. Updates what is held.
void check_held(const orbit::ToolCallReader& reader, const orbit::ToolCallReading& read, std::string& held,
                uint64_t& grown) {
  const orbit::ToolCallReading tail = reader.read(0, {grown, held.size()});
  if (tail.calls.size() != read.calls.size() || tail.growing != read.growing) std::abort();
  if (tail.calls.empty()) return;
  if (tail.arguments_from > held.size() || (tail.arguments_from > 0 && tail.growing != grown)) std::abort();
  const std::string arguments = held.substr(0, tail.arguments_from) + tail.calls.back().arguments;
  if (arguments != read.calls.back().arguments) std::abort();
  const std::size_t shorter = std::min(held.size(), arguments.size());
  if (tail.growing != 0 && tail.growing == grown && held.compare(0, shorter, arguments, 0, shorter) != 0) {
    std::abort();
  }
  held = arguments;
  grown = tail.growing;
}

// ToolCallReader fed `text` in pieces against parse_tool_calls(kCall) of each prefix it was fed; read(first)
// from the calls a reading says are complete gives the rest of that reading, and those complete calls are in
// every later reading that holds calls, as they were; a caller holding the arguments being written reads them
// alike (check_held).
void check_reader(const std::string& text, orbit::ToolCallFormat format) {
  orbit::ToolCallReader reader(format);
  std::vector<orbit::ChatToolCall> complete;
  std::string held;
  uint64_t grown = 0;
  for (std::size_t at = 0, i = 0; at < text.size(); ++i) {
    const std::size_t end = std::min(text.size(), at + 1 + static_cast<unsigned char>(text[i % text.size()]) % 16);
    reader.append(std::string_view(text).substr(at, end - at));
    at = end;
    const orbit::ToolCallReading read = reader.read();
    const orbit::ToolCallParse whole = orbit::parse_tool_calls(reader.text(), format, orbit::CutToolCall::kCall);
    if (read.calls.size() != whole.calls.size() || read.cut != whole.cut ||
        read.cut_name_whole != whole.cut_name_whole) {
      std::abort();
    }
    for (std::size_t c = 0; c < read.calls.size(); ++c) {
      if (read.calls[c].name != whole.calls[c].name || read.calls[c].arguments != whole.calls[c].arguments) {
        std::abort();
      }
    }
    if (read.complete > read.calls.size()) std::abort();
    check_held(reader, read, held, grown);
    const orbit::ToolCallReading rest = reader.read(read.complete);
    if (rest.first != read.complete || rest.calls.size() != read.calls.size() - read.complete) std::abort();
    for (std::size_t c = 0; c < rest.calls.size(); ++c) {
      if (rest.calls[c].arguments != read.calls[read.complete + c].arguments) std::abort();
    }
    if (read.calls.empty()) continue;
    if (read.complete < complete.size()) std::abort();
    for (std::size_t c = 0; c < complete.size(); ++c) {
      if (read.calls[c].id != complete[c].id || read.calls[c].arguments != complete[c].arguments) std::abort();
    }
    complete.assign(read.calls.begin(), read.calls.begin() + static_cast<std::ptrdiff_t>(read.complete));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const orbit::ToolCallFormat formats[] = {orbit::ToolCallFormat::kHermes, orbit::ToolCallFormat::kLlama3,
                                           orbit::ToolCallFormat::kMistral};
  const orbit::ToolCallFormat format = formats[data[0] % 3];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const bool utf8 = valid_utf8(text);
  const orbit::ToolCallParse plain = orbit::parse_tool_calls(text, format);
  const orbit::ToolCallParse cut = orbit::parse_tool_calls(text, format, orbit::CutToolCall::kCall);
  check(plain, utf8);
  check(cut, utf8);
  if (plain.cut) std::abort();
  // Where nothing was left as content for being unfinished, reading cut calls changes nothing.
  if (!plain.malformed && !same(plain, cut)) std::abort();
  check_forced(text, cut, orbit::parse_tool_calls(text, format, orbit::CutToolCall::kForcedCall));
  (void)orbit::tool_call_free_prefix(text, format);
  if (text.size() <= 2048) check_reader(text, format);
  return 0;
}

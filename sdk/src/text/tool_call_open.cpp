// The call a streamed answer is writing, read as it grows (tool_call_open.h). The phases follow
// tool_call_cut::read's loop, and a value ends where json_spans::value_end ends it, byte for byte: those read
// any text, not only JSON, so the two agree on every text, and JsonPrefix says which texts read() is taken on.
#include "text/tool_call_open.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "text/tool_call_parts.h"

namespace orbit::tool_call_parts {

using json_spans::is_space;
using json_spans::JsonScan;

namespace {

// A number no arguments read before were given, in any reader or thread (ToolCallReading::growing).
uint64_t next_number() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace

void OpenCall::extend(std::string_view raw) {
  if (fed_ == 0 && !raw.empty()) {
    object_ = raw[0] == '{';
    whole_ = static_cast<unsigned char>(raw[0]) == 0xEF;  // maybe a byte order mark: nlohmann skips it
    read_.call.arguments.clear();                         // "" until they begin, as read() has them
  }
  if (!object_ || whole_) {
    fed_ = raw.size();
    return;
  }
  prefix_.feed(raw.substr(fed_));
  // Past an error, no call is read again; past the object's end, the text is read whole.
  for (; fed_ < raw.size() && !prefix_.broken() && !prefix_.whole() && !whole_; ++fed_) member_byte(raw, fed_);
  fed_ = raw.size();
  if (arguments_.on && arguments_.string && !whole_) decode_arguments(raw);
}

bool OpenCall::read(std::string_view raw, ChatToolCall* call, ToolCallParse* r, ToolCallHeld* held) const {
  const ToolCallHeld asked = held != nullptr ? *held : ToolCallHeld();
  if (held != nullptr) *held = ToolCallHeld();
  if (raw.empty() || !(object_ || whole_)) return false;
  if (whole_ || prefix_.whole()) return cut_call_from(std::string(raw), call, r);
  if (!prefix_.cut_short()) return false;
  tool_call_cut::CutCall c = read_;
  if (phase_ == Phase::kValue || phase_ == Phase::kValueClosed) {  // the member being written
    if (arguments_.on && (key_ == "arguments" || !from_arguments_)) {
      // Every reading of these arguments is a prefix of `compact`, which only grows: the bytes held are known.
      const std::string_view arguments = open_arguments(raw);
      const std::size_t from = asked.growing == arguments_.number ? std::min(asked.bytes, arguments.size()) : 0;
      c.call.arguments.assign(arguments.substr(from));
      if (held != nullptr) *held = ToolCallHeld{arguments_.number, from};
    } else {
      bool from_arguments = from_arguments_;
      tool_call_cut::take_member(key_, raw.substr(begin_), false, &c, &from_arguments);
    }
  }
  if (!c.named) return false;
  if (c.call.id.empty()) c.call.id = new_tool_call_id();
  *call = std::move(c.call);
  r->cut = true;
  r->cut_name_whole = c.name_whole;
  return true;
}

void OpenCall::member_byte(std::string_view raw, std::size_t i) {
  switch (phase_) {
    case Phase::kStart: phase_ = Phase::kBeforeKey; return;  // the '{'
    case Phase::kKey:
      if (scan_.step(raw[i]) == JsonScan::At::kClose) {
        end_ = i + 1;
        phase_ = Phase::kKeyClosed;
      }
      return;
    case Phase::kKeyClosed:  // a byte follows the key: read() takes it
      key_ = tool_call_cut::string_so_far(raw.substr(begin_, end_ - begin_));
      phase_ = Phase::kAfterKey;
      [[fallthrough]];
    case Phase::kAfterKey:
      if (!is_space(raw[i])) phase_ = raw[i] == ':' ? Phase::kAfterColon : Phase::kStopped;
      return;
    case Phase::kAfterColon:
      if (is_space(raw[i])) return;
      phase_ = Phase::kValue;
      begin_ = i;
      depth_ = 0;
      scan_ = JsonScan();
      arguments_ = Arguments();
      arguments_.on = key_ == "arguments" || key_ == "parameters";
      arguments_.number = next_number();
      arguments_.string = raw[i] == '"';
      return value_byte(raw, i);
    case Phase::kValue: return value_byte(raw, i);
    case Phase::kValueClosed:  // a byte follows the value
      settle(raw, end_);
      return before_key(raw, i);
    case Phase::kBeforeKey: return before_key(raw, i);
    case Phase::kStopped: return;
  }
}

void OpenCall::before_key(std::string_view raw, std::size_t i) {
  const char c = raw[i];
  if (is_space(c)) return;
  if (c == ',' && !comma_) {
    comma_ = true;
    return;
  }
  if (c != '"') {
    phase_ = Phase::kStopped;  // read()'s loop breaks here, whatever follows
    return;
  }
  phase_ = Phase::kKey;
  begin_ = i;
  scan_ = JsonScan();
  scan_.step(c);
}

// json_spans::value_end, one byte at a time: the value ends after a closing quote or bracket at its own
// depth (kValueClosed, settled by the next byte), or before a ',', a space or a bracket that closes its
// container (settled now; that byte is read between members).
void OpenCall::value_byte(std::string_view raw, std::size_t i) {
  const char c = raw[i];
  const JsonScan::At where = scan_.step(c);
  bool ends_after = where == JsonScan::At::kClose && depth_ == 0;
  bool ends_before = false;
  if (where == JsonScan::At::kOutside) {
    if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      --depth_;
      ends_after = depth_ == 0;
      ends_before = depth_ < 0;
    } else if (depth_ == 0 && (c == ',' || is_space(c))) {
      ends_before = true;
    }
  }
  if (ends_before) {
    settle(raw, i);
    return before_key(raw, i);
  }
  if (arguments_.on) arguments_byte(i, c, where);
  if (ends_after) {
    end_ = i + 1;
    phase_ = Phase::kValueClosed;
  }
}

void OpenCall::arguments_byte(std::size_t i, char c, JsonScan::At where) {
  Arguments& a = arguments_;
  if (!a.string) {  // compact(): the bytes but the spaces between tokens
    if (where != JsonScan::At::kOutside || !is_space(c)) a.compact += c;
    return;
  }
  if (i == begin_) {  // the opening quote
    a.whole_to = a.decoded_to = i + 1;
    return;
  }
  switch (a.lexer.step(static_cast<unsigned char>(c))) {
    case json_spans::StringLexer::Step::kInside: return;
    case json_spans::StringLexer::Step::kWhole: a.whole_to = i + 1; return;
    case json_spans::StringLexer::Step::kClosed:
      a.whole_to = i;
      a.closed = true;
      return;
    case json_spans::StringLexer::Step::kBad: whole_ = true; return;  // not JSON: read whole if ever read
  }
}

// Decodes the string's whole characters and escapes that came (each piece between two such ends decodes to
// what it does within the string), and compacts what they add.
void OpenCall::decode_arguments(std::string_view raw) {
  Arguments& a = arguments_;
  if (a.whole_to <= a.decoded_to) return;
  const std::string piece = "\"" + std::string(raw.substr(a.decoded_to, a.whole_to - a.decoded_to)) + "\"";
  const nlohmann::json decoded = json_spans::parse_json(piece);
  if (!decoded.is_string()) {
    whole_ = true;
    return;
  }
  for (char c : decoded.get_ref<const std::string&>()) {
    if (a.compact_scan.step(c) != JsonScan::At::kOutside || !is_space(c)) a.compact += c;
  }
  a.decoded_to = a.whole_to;
}

void OpenCall::settle(std::string_view raw, std::size_t end) {
  tool_call_cut::take_member(key_, raw.substr(begin_, end - begin_), true, &read_, &from_arguments_);
  arguments_ = Arguments();
  phase_ = Phase::kBeforeKey;
  comma_ = false;
}

// take_member's arguments for the value being written, raw[begin_, raw.size()).
std::string_view OpenCall::open_arguments(std::string_view raw) const {
  const Arguments& a = arguments_;
  const std::string_view compact = a.compact;
  if (!a.string) return compact.substr(0, tool_call_cut::whole_characters_size(compact));
  // string_so_far leaves out up to 6 bytes of a character or escape cut at the end, and gives "" past that
  // (a surrogate pair's second half cut).
  return a.closed || raw.size() - a.whole_to <= 6 ? compact : compact.substr(0, 0);
}

void OpenCall::renumber() {
  if (arguments_.number != 0) arguments_.number = next_number();
}

}  // namespace orbit::tool_call_parts

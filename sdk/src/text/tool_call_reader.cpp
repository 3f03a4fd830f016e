// Reading the calls of a growing text (orbit/tool_calls.h: ToolCallReader). Why keeping a call gives what a
// whole reading gives:
//   Hermes   parse_tool_calls reads blocks left to right, each from the end of the one before; a closed block
//            is a call or stops the reading there (the rest is content). So the calls of the text from a kept
//            block's end on, after the kept ones, are the whole text's; after a closed block that is not a
//            call there are none.
//   Llama 3  a ';' outside strings at depth 0 (after the JSON's '{') makes the text no JSON value, whole or cut,
//            so parse_tool_calls splits it into pieces there, and every piece but the last must be a call or
//            none is read (a ';' and spaces at the end make no piece). So the kept pieces are calls, the last
//            piece is read as a cut call after them, and once a piece before a ';' is not a call there are no
//            calls at all as soon as anything but spaces follows it.
#include <algorithm>
#include <string>

#include "orbit/tool_calls.h"
#include "text/json_spans.h"
#include "text/tool_call_parts.h"

namespace orbit {

using namespace json_spans;
using namespace tool_call_parts;

namespace {

// Where Llama 3's JSON text starts in `text` (past spaces and the python tag, as parse_tool_calls reads it),
// once that is its '{'; npos while it is not (yet) a call's.
std::size_t llama3_json_start(std::string_view text) {
  std::size_t at = skip_space(text, 0);
  if (text.substr(at, kPythonTag.size()) == kPythonTag) at = skip_space(text, at + kPythonTag.size());
  return at < text.size() && text[at] == '{' ? at : std::string_view::npos;
}

}  // namespace

void ToolCallReader::append(std::string_view more) {
  text_ += more;
  if (ended_ || broken_) return;
  // What was there before was read to its end: a call completes only where `more` brings the last byte of a
  // closing mark, or a ';'.
  if (format_ == ToolCallFormat::kHermes && more.find(kHermesClose.back()) != std::string_view::npos) keep_hermes();
  if (format_ == ToolCallFormat::kLlama3 && more.find(';') != std::string_view::npos) keep_llama3();
}

void ToolCallReader::keep_hermes() {
  while (true) {
    const std::size_t open = text_.find(kHermesOpen, kept_at_);
    if (open == std::string::npos) return;
    const std::size_t body = open + kHermesOpen.size();
    const std::size_t close = text_.find(kHermesClose, body);
    if (close == std::string::npos) return;
    const std::string raw = trim(std::string_view(text_).substr(body, close - body));
    ChatToolCall call;
    if (!call_from(parse_json(raw), raw, &call)) {
      ended_ = true;  // not a call: the reading stops at this block
      return;
    }
    kept_.push_back(std::move(call));
    kept_at_ = close + kHermesClose.size();
  }
}

void ToolCallReader::keep_llama3() {
  const std::size_t start = kept_at_ > 0 ? kept_at_ : llama3_json_start(text_);
  if (start == std::string::npos) return;
  for (std::size_t from = start;;) {
    const std::size_t separator = llama3_separator(text_, from);
    if (separator == std::string::npos) return;
    const std::string piece = trim(std::string_view(text_).substr(from, separator - from));
    ChatToolCall call;
    if (!call_from(parse_json(piece), piece, &call)) {
      // A piece before a ';' that is not a call: the last piece while only spaces follow (the calls before it
      // are read), else no calls at all.
      broken_ = true;
      kept_at_ = separator + 1;
      return;
    }
    kept_.push_back(std::move(call));
    from = kept_at_ = separator + 1;
  }
}

ToolCallReading ToolCallReader::read() const {
  ToolCallReading out;
  if (broken_ && text_.find_first_not_of(" \n\t\r", kept_at_) != std::string::npos) return out;
  out.calls = kept_;
  if (ended_ || broken_) return out;
  ToolCallParse rest;
  const std::string_view after = std::string_view(text_).substr(kept_at_);
  if (format_ == ToolCallFormat::kHermes) {
    rest = parse_hermes(after, CutToolCall::kCall);
  } else if (format_ == ToolCallFormat::kLlama3 && kept_at_ > 0) {
    const std::string piece = trim(after);  // the last piece, after whole ones: read as a cut call, if it is one
    ChatToolCall call;
    if (!piece.empty() && cut_call_from(piece, &call, &rest)) rest.calls.push_back(std::move(call));
  } else {
    rest = parse_tool_calls(text_, format_, CutToolCall::kCall);  // nothing kept: the text whole
  }
  out.calls.insert(out.calls.end(), std::make_move_iterator(rest.calls.begin()),
                   std::make_move_iterator(rest.calls.end()));
  out.cut = rest.cut;
  out.cut_name_whole = rest.cut_name_whole;
  return out;
}

}  // namespace orbit

// Reading the calls of a growing text (orbit/tool_calls.h: ToolCallReader). Why keeping a call gives what a
// whole reading gives:
//   Hermes   parse_tool_calls reads blocks left to right, each from the end of the one before; a block ends
//            at the first closing mark before which it is a call (hermes_close: the mark may stand inside the
//            call's strings), and one that no mark makes a call is read as a cut call, else stops the reading
//            there (the rest is content). So the calls of the text from a kept block's end on, after the kept
//            ones, are the whole text's; a block no mark has made a call yet is the call being written.
//   Llama 3  a ';' outside strings at depth 0 (after the JSON's '{') makes the text no JSON value, whole or cut,
//            so parse_tool_calls splits it into pieces there, and every piece but the last must be a call or
//            none is read (a ';' and spaces at the end make no piece). So the kept pieces are calls, the last
//            piece is read as a cut call after them, and once a piece before a ';' is not a call there are no
//            calls at all as soon as anything but spaces follows it. But nlohmann ends a text at a NUL byte:
//            after a whole object, spaces and a NUL, the text parses whatever follows, ';'s too, and is read
//            as that one object. So a NUL before the first ';' leaves the text to be read whole each time.
// What follows the kept calls is at most one call being written, and parse_tool_calls reads it with
// cut_call_from: Hermes' block after its opening mark, less a partial closing mark and the spaces at the end;
// Llama 3's last piece (the text from its '{' while nothing is kept: a ';' outside strings at depth 0 would
// have kept or broken a piece), trimmed. An OpenCall (tool_call_open.h) reads that text as it grows: it
// only grows, for a byte before its end is neither a space nor part of a partial mark, and stays so.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "orbit/tool_calls.h"
#include "text/json_spans.h"
#include "text/tool_call_open.h"
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

// Hermes: the block after kept_ has its opening mark at or after `from` (body npos), or its body at `body`
// and its closing mark at or after `from`. Llama 3: the ';' that ends the piece after kept_ (its scan
// started where the piece does, once that is known).
struct ToolCallReader::Scan {
  std::size_t body = std::string::npos;
  std::size_t from = 0;
  std::optional<tool_call_parts::SeparatorScan> separator;
};

struct ToolCallReader::Open {
  tool_call_parts::OpenCall call;
  std::size_t at = std::string::npos;    // where its text starts in text_ (not a space); npos before
  std::size_t body = std::string::npos;  // Hermes: where the text after its opening mark starts; npos before
  std::size_t searched = 0;              // Hermes: the opening mark does not start before this in text_
};

ToolCallReader::ToolCallReader(ToolCallFormat format)
    : format_(format), open_(std::make_unique<Open>()), scan_(std::make_unique<Scan>()) {}
ToolCallReader::~ToolCallReader() = default;
ToolCallReader::ToolCallReader(const ToolCallReader& other)
    : format_(other.format_),
      text_(other.text_),
      kept_at_(other.kept_at_),
      kept_(other.kept_),
      broken_(other.broken_),
      whole_(other.whole_),
      open_(std::make_unique<Open>(other.open_ ? *other.open_ : Open())),
      scan_(std::make_unique<Scan>(other.scan_ ? *other.scan_ : Scan())) {
  open_->call.renumber();  // the two texts may grow apart
}
ToolCallReader& ToolCallReader::operator=(const ToolCallReader& other) {
  if (this != &other) *this = ToolCallReader(other);
  return *this;
}
ToolCallReader::ToolCallReader(ToolCallReader&& other) noexcept = default;
ToolCallReader& ToolCallReader::operator=(ToolCallReader&& other) noexcept = default;

void ToolCallReader::append(std::string_view more) {
  text_ += more;
  if (broken_ || whole_) return;
  if (!open_) open_ = std::make_unique<Open>();  // a reader moved from, assigned anew
  if (!scan_) scan_ = std::make_unique<Scan>();
  // What was there before was read to its end: a call completes only where `more` brings the last byte of a
  // closing mark, or a ';'.
  const std::size_t kept_at = kept_at_;
  if (format_ == ToolCallFormat::kHermes && more.find(kHermesClose.back()) != std::string_view::npos) keep_hermes();
  if (format_ == ToolCallFormat::kLlama3 && more.find(';') != std::string_view::npos) keep_llama3();
  if (kept_at_ != kept_at) *open_ = Open();  // the call being written is the one after those kept
  extend_open();
}

namespace {

// Where a search for `mark` that found none in `text` resumes: a mark may yet end in its last bytes.
std::size_t resume_at(std::string_view text, std::string_view mark, std::size_t from) {
  return std::max(from, text.size() - std::min(text.size(), mark.size() - 1));
}

}  // namespace

void ToolCallReader::extend_open() {
  if (broken_ || format_ == ToolCallFormat::kMistral) return;
  Open& o = *open_;
  std::size_t start = kept_at_;  // where the call's text may start (spaces before it)
  std::size_t end = text_.size();
  if (format_ == ToolCallFormat::kHermes) {
    if (o.body == std::string::npos) {
      const std::size_t from = std::max(o.searched, kept_at_);
      const std::size_t mark = text_.find(kHermesOpen, from);
      if (mark == std::string::npos) {  // a mark may yet end in the last bytes
        o.searched = resume_at(text_, kHermesOpen, from);
        return;
      }
      o.body = mark + kHermesOpen.size();
    }
    start = o.body;
    end -= partial_marker(std::string_view(text_).substr(o.body), kHermesClose);
  } else if (kept_at_ == 0) {
    start = llama3_json_start(text_);
    if (start == std::string::npos) return;
  }
  if (o.at == std::string::npos) {
    const std::size_t first = skip_space(text_, start);
    if (first >= end) return;
    o.at = first;
  }
  while (end > o.at && is_space(text_[end - 1])) --end;
  const std::size_t size = end > o.at ? end - o.at : 0;
  if (size < o.call.fed()) o.call = tool_call_parts::OpenCall();  // it never shrinks, but were it to: anew
  o.call.extend(std::string_view(text_).substr(o.at, size));
}

void ToolCallReader::keep_hermes() {
  Scan& scan = *scan_;
  while (true) {
    if (scan.body == std::string::npos) {
      const std::size_t from = std::max(scan.from, kept_at_);
      const std::size_t open = text_.find(kHermesOpen, from);
      if (open == std::string::npos) {
        scan.from = resume_at(text_, kHermesOpen, from);
        return;
      }
      scan.body = scan.from = open + kHermesOpen.size();
    }
    const std::size_t close = text_.find(kHermesClose, scan.from);
    if (close == std::string::npos) {
      scan.from = resume_at(text_, kHermesClose, scan.from);
      return;
    }
    const std::string raw = trim(std::string_view(text_).substr(scan.body, close - scan.body));
    ChatToolCall call;
    if (!call_from(parse_json(raw), raw, &call)) {
      scan.from = close + 1;  // not a call yet: the mark stands inside it (hermes_close), or it never will be
      continue;
    }
    kept_.push_back(std::move(call));
    kept_at_ = close + kHermesClose.size();
    scan = Scan();
  }
}

void ToolCallReader::keep_llama3() {
  Scan& scan = *scan_;
  if (!scan.separator) {
    const std::size_t start = kept_at_ > 0 ? kept_at_ : llama3_json_start(text_);
    if (start == std::string::npos) return;
    scan.separator.emplace(start);
  }
  while (true) {
    const std::size_t from = scan.separator->from();
    const std::size_t separator = scan.separator->find(text_);
    if (separator == std::string::npos) return;
    if (kept_at_ == 0 && scan.separator->first_nul() < separator) {
      whole_ = true;  // the ';' may not split the text (see above)
      return;
    }
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
    kept_at_ = separator + 1;
    scan.separator.emplace(kept_at_);
  }
}

ToolCallReading ToolCallReader::read(std::size_t first, ToolCallHeld held) const {
  ToolCallReading out;
  out.first = first;
  if (broken_ && text_.find_first_not_of(" \n\t\r", kept_at_) != std::string::npos) return out;
  out.complete = kept_.size();
  if (first < kept_.size()) out.calls.assign(kept_.begin() + static_cast<std::ptrdiff_t>(first), kept_.end());
  if (broken_) return out;
  ToolCallParse rest;
  ToolCallHeld got;  // what the call being written says of its arguments' bytes `held` holds
  if (format_ == ToolCallFormat::kMistral || whole_) {
    rest = parse_tool_calls(text_, format_, CutToolCall::kCall);  // Mistral's one array, or a NUL: the text whole
  } else if (open_ && open_->at != std::string::npos) {
    ChatToolCall call;
    const std::string_view raw = std::string_view(text_).substr(open_->at, open_->call.fed());
    got = held;
    if (open_->call.read(raw, &call, &rest, &got)) rest.calls.push_back(std::move(call));
  }
  // rest's calls follow those kept (a whole text's too: nothing is kept then), from index kept_.size().
  const std::size_t skip = std::min(rest.calls.size(), first > kept_.size() ? first - kept_.size() : 0);
  out.calls.insert(out.calls.end(), std::make_move_iterator(rest.calls.begin() + static_cast<std::ptrdiff_t>(skip)),
                   std::make_move_iterator(rest.calls.end()));
  out.cut = rest.cut;
  out.cut_name_whole = rest.cut_name_whole;
  if (!rest.calls.empty() && skip < rest.calls.size()) {  // the call being written is out.calls.back()
    out.growing = got.growing;
    out.arguments_from = got.bytes;
  }
  return out;
}

}  // namespace orbit

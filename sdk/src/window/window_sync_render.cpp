// The rendering half of Window::sync (sync_render.h; orbit/sync.h steps 2-3): the list rendered with the template
// step 1 chose (window_sync_chat.cpp), cut into one unit per message, and tokenized; and Engine::tokenize_chat.
#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "engine/engine_core.h"
#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "orbit/runtime/chat_template.h"
#include "orbit/sync.h"
#include "text/text_bound.h"
#include "window/sync_chat.h"
#include "window/sync_encode.h"
#include "window/sync_memo.h"
#include "window/sync_render.h"
#include "window/window_state.h"

namespace orbit {

using detail::Chat;
using detail::find_markers;
using detail::Marker;
using detail::PartRef;
using detail::render_options;
using detail::Rendering;
using detail::resolve_chat;
using detail::Span;
using detail::to_runtime;

namespace {

struct Renderer {
  const Chat& chat;
  runtime::PreparedChat messages;  // the list, converted once for every prefix's render
  const char* caller;              // the function the user called, for errors

  // The first `n` messages rendered.
  std::string operator()(std::size_t n, bool add_generation_prompt) const {
    return chat.tmpl->render_prefix(messages, n, add_generation_prompt);
  }
};

// ---- tokens ----

std::atomic<bool> cut_by_token_bytes{true};  // detail::set_cut_by_token_bytes
std::atomic<int64_t> prefix_encodes{0};      // detail::prefix_encodes_so_far

// `text`, once it is known to tokenize within the model's positions (throws otherwise, naming `caller`).
std::string_view fitting(const detail::EngineCore& core, std::string_view text, const char* caller) {
  const runtime::Tokenizer& t = core.tokenizer();
  detail::check_text_fits(
      text, core.max_positions(), [&] { return t.longest_piece_bytes(); },
      std::string(caller) + ": the rendered messages");
  return text;
}

std::vector<int64_t> encode(const detail::EngineCore& core, std::string_view text, const char* caller) {
  return core.tokenizer().encode(fitting(core, text, caller), false);
}

bool starts_with(const std::vector<int64_t>& all, const std::vector<int64_t>& prefix) {
  return prefix.size() <= all.size() && std::equal(prefix.begin(), prefix.end(), all.begin());
}

bool starts_with(const std::string& all, const std::string& prefix) {
  return prefix.size() <= all.size() && all.compare(0, prefix.size(), prefix) == 0;
}

using Cut = detail::TextCut;
// A token index where a unit ends, and the first message of the next unit.
using TokenCut = std::pair<std::size_t, int64_t>;

// Step 3, first test: each unit's text tokenized alone joins back into `tokens`. Empty when it does not.
std::vector<TokenCut> cuts_by_parts(const runtime::Tokenizer& tok, const std::string& text,
                                    const std::vector<Cut>& cuts, const std::vector<int64_t>& tokens, int64_t* merged,
                                    bool* joined_ok) {
  std::vector<std::vector<int64_t>> parts;
  std::vector<int64_t> joined;
  std::size_t from = 0;
  for (std::size_t c = 0; c <= cuts.size(); ++c) {
    const std::size_t to = c < cuts.size() ? cuts[c].text : text.size();
    parts.push_back(tok.encode(std::string_view(text).substr(from, to - from), false));
    joined.insert(joined.end(), parts.back().begin(), parts.back().end());
    from = to;
  }
  std::vector<TokenCut> out;
  *joined_ok = joined == tokens;
  if (!*joined_ok) return out;
  std::size_t at = 0;
  for (std::size_t c = 0; c < cuts.size(); ++c) {
    at += parts[c].size();
    const std::size_t last = out.empty() ? 0 : out.back().first;
    if (at > last && at < tokens.size()) {
      out.emplace_back(at, cuts[c].message);
    } else {
      ++*merged;  // a message that renders to no tokens joins its neighbour
    }
  }
  return out;
}

// The number of tokens of text[0, at), read from the bytes of the text's tokens (`bytes`, in token order) of
// a prefix-stable tokenizer: when `at` is a character boundary that no token straddles, the tokens that end
// at or before it (runtime::Tokenizer::prefix_stable). nullopt otherwise: the prefix must be encoded.
std::optional<std::size_t> tokens_before(const std::vector<runtime::TokenBytes>& bytes, std::string_view text,
                                         std::size_t at) {
  if (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) return std::nullopt;
  const auto after =
      std::partition_point(bytes.begin(), bytes.end(), [&](const runtime::TokenBytes& b) { return b.end <= at; });
  if (after != bytes.end() && after->begin < at) return std::nullopt;  // the first token after it straddles it
  return static_cast<std::size_t>(after - bytes.begin());
}

// Step 3, second test: the tokens of the text before a cut are a prefix of the rendering's tokens. With the
// tokens' bytes (whole.bytes; a prefix-stable tokenizer), a cut no token straddles is decided from them:
// its prefix's tokens are the tokens before it. Only the other cuts, and every cut of other tokenizers,
// encode their prefix.
std::vector<TokenCut> cuts_by_prefix(const runtime::Tokenizer& tok, const std::string& text,
                                     const std::vector<Cut>& cuts, const runtime::Encoding& whole, int64_t* merged) {
  const std::vector<int64_t>& tokens = whole.ids;
  std::vector<TokenCut> out;
  for (const Cut& c : cuts) {
    std::optional<std::size_t> count;
    if (!whole.bytes.empty()) count = tokens_before(whole.bytes, text, c.text);
    if (!count) {
      prefix_encodes.fetch_add(1, std::memory_order_relaxed);
      const std::vector<int64_t> before = tok.encode(std::string_view(text).substr(0, c.text), false);
      if (starts_with(tokens, before)) count = before.size();
    }
    const std::size_t last = out.empty() ? 0 : out.back().first;
    if (count && *count > last && *count < tokens.size()) {
      out.emplace_back(*count, c.message);
    } else {
      ++*merged;
    }
  }
  return out;
}

// The units of one text segment: token spans between the cuts (token indices relative to the segment), each
// with the message it starts in (`first`: the segment's first one), appended to `spans` at token `offset`.
void add_spans(const std::vector<TokenCut>& token_cuts, std::size_t tokens, std::size_t offset, int64_t first,
               std::vector<Span>& spans) {
  std::size_t begin = 0;
  for (std::size_t c = 0; c <= token_cuts.size(); ++c) {
    const std::size_t end = c < token_cuts.size() ? token_cuts[c].first : tokens;
    if (end > begin) spans.push_back({first, 0, offset + begin, offset + end});
    begin = end;
    if (c < token_cuts.size()) first = token_cuts[c].second;
  }
}

// The message the text at byte `at` belongs to: the latest message boundary or chunk part before it (a
// boundary at a part's end: the next message starts there).
int64_t message_at(std::size_t at, const std::vector<Cut>& cuts, const std::vector<Marker>& marks,
                   const std::vector<PartRef>& parts) {
  int64_t message = 0;
  std::size_t from = 0;
  for (const Marker& m : marks) {
    if (m.end <= at && m.end >= from) {
      from = m.end;
      message = parts[m.part].message;
    }
  }
  for (const Cut& c : cuts) {
    if (c.text <= at && c.text >= from) {
      from = c.text;
      message = c.message;
    }
  }
  return message;
}

// A text segment of the rendering (the text between chunk parts): bytes [begin, end), the message it starts
// in, its number among the segments, and its tokens when they are known already (tail_with_prompt), else
// encoded by add_segment.
struct Segment {
  std::size_t begin = 0;
  std::size_t end = 0;
  int64_t first = 0;
  std::size_t index = 0;
  std::optional<runtime::Encoding> tokens;
};

bool by_token_bytes(const runtime::Tokenizer& tok) {
  return tok.prefix_stable() && cut_by_token_bytes.load(std::memory_order_relaxed);
}

// Step 3's encodes with bytes (a prefix-stable tokenizer): each segment's from the earlier list's same segment
// where the encodings memo holds that list (sync_encode.h), each kept for the next list.
struct Encoder {
  const runtime::Tokenizer& tok;
  bool incremental = false;                            // detail::encodes_incrementally
  std::shared_ptr<const detail::ListEncodings> known;  // the earlier list's; null: none
  std::shared_ptr<detail::ListEncodings> made;         // this list's (incremental only)
  const std::vector<Cut>* cuts = nullptr;              // where messages start in the rendering

  // encode_with_bytes(text) of segment `index` (its text, or that text and the generation prompt's), which
  // starts at byte `begin` of the rendering.
  runtime::Encoding operator()(std::size_t index, std::size_t begin, std::string_view text) {
    if (!incremental) return tok.encode_with_bytes(text);
    const detail::SegmentEncoding* k =
        known != nullptr && index < known->segments.size() ? &known->segments[index] : nullptr;
    std::vector<std::size_t> starts;  // the messages starting inside the segment, from its start
    for (const Cut& c : *cuts) {
      if (c.text > begin && c.text < begin + text.size()) starts.push_back(c.text - begin);
    }
    runtime::Encoding e = detail::encode_reusing(tok, text, k, starts);
    if (made->segments.size() <= index) made->segments.resize(index + 1);
    made->segments[index] = {std::string(text), e};
    return e;
  }
};

// Step 3 on a text segment: its tokens, cut at the message boundaries inside it where the tokens allow.
void add_segment(Encoder& encode, const std::string& text, const std::vector<Cut>& cuts, Segment seg, Rendering& out) {
  const runtime::Tokenizer& tok = encode.tok;
  const std::string segment = text.substr(seg.begin, seg.end - seg.begin);
  runtime::Encoding whole;
  if (seg.tokens) {
    whole = std::move(*seg.tokens);
  } else if (by_token_bytes(tok)) {
    whole = encode(seg.index, seg.begin, segment);
  } else {
    whole.ids = tok.encode(segment, false);
  }
  const std::vector<int64_t>& tokens = whole.ids;
  std::vector<Cut> inside;
  for (const Cut& c : cuts) {
    if (c.text > seg.begin && c.text < seg.end) inside.push_back({c.text - seg.begin, c.message});
  }
  bool joined_ok = false;
  std::vector<TokenCut> token_cuts = cuts_by_parts(tok, segment, inside, tokens, &out.merged, &joined_ok);
  if (!joined_ok) token_cuts = cuts_by_prefix(tok, segment, inside, whole, &out.merged);
  add_spans(token_cuts, tokens.size(), out.tokens.size(), seg.first, out.spans);
  out.tokens.insert(out.tokens.end(), tokens.begin(), tokens.end());
}

// A chunk part's unit: its tokens, or kEmbeddingRow per row.
void add_part(const detail::EngineCore& core, std::size_t part, Rendering& out) {
  const PartRef& p = out.parts[part];
  const std::size_t begin = out.tokens.size();
  const detail::ChunkPtr held = core.registry().record(p.chunk);
  const detail::ChunkRecord& rec = *held;
  if (p.chunk.kind == ChunkKind::kTokens) {
    out.tokens.insert(out.tokens.end(), rec.tokens.begin(), rec.tokens.end());
  } else {
    out.tokens.insert(out.tokens.end(), static_cast<std::size_t>(p.chunk.length), kEmbeddingRow);
  }
  out.spans.push_back({p.message, p.message + 1, begin, out.tokens.size(), static_cast<int64_t>(part)});
}

// Each unit holds the messages from its first to the next unit's first (at least its own); the last, to
// the end of the list.
void set_end_messages(std::size_t n, std::vector<Span>& spans) {
  for (std::size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].part >= 0) continue;
    const int64_t next = i + 1 < spans.size() ? spans[i + 1].first_message : static_cast<int64_t>(n);
    spans[i].end_message = std::max(next, spans[i].first_message + 1);
  }
}

// The generation prompt: what add_generation_prompt adds, as tokens after the window's. `tail` is where the
// last text segment starts (after the last chunk part), `tail_tokens` its tokens.
void add_generation_prompt(const detail::EngineCore& core, const Renderer& render, std::size_t n,
                           const std::string& text, std::size_t tail, std::size_t tail_tokens, Rendering& out) {
  std::string with_prompt;
  try {
    with_prompt = render(n, true);
  } catch (const Error&) {
    out.generation_prompt_exact = false;
    return;
  }
  if (!starts_with(with_prompt, text)) {
    out.generation_prompt_exact = false;  // the template renders the list differently with the prompt
    return;
  }
  if (with_prompt.size() == text.size()) return;
  const std::vector<int64_t> all = encode(core, std::string_view(with_prompt).substr(tail), render.caller);
  const std::vector<int64_t> last(out.tokens.end() - static_cast<std::ptrdiff_t>(tail_tokens), out.tokens.end());
  if (starts_with(all, last)) {
    out.generation_prompt.assign(all.begin() + static_cast<std::ptrdiff_t>(last.size()), all.end());
  } else {
    out.generation_prompt = core.tokenizer().encode(std::string_view(with_prompt).substr(text.size()), false);
    out.generation_prompt_exact = false;
  }
}

// With a prefix-stable tokenizer, the last segment's tokens and the generation prompt from one encode of the
// segment with the prompt's text after it: where no token straddles the rendering's end, the segment's tokens
// are those before it (runtime::Tokenizer::prefix_stable; the bytes before it decide its cuts as its own
// would) and the prompt is the rest, which is what add_generation_prompt finds by encoding both. Sets
// tail.tokens and returns the prompt; nullopt where this does not apply (the template refuses the prompt or
// renders the list otherwise with it, no prompt, a straddled end, text that does not fit), and
// add_generation_prompt decides after the segment is added, as for other tokenizers (its errors as before).
std::optional<std::vector<int64_t>> tail_with_prompt(const detail::EngineCore& core, const Renderer& render,
                                                     std::size_t n, const std::string& text, Segment& tail,
                                                     Encoder& encode) {
  const runtime::Tokenizer& tok = core.tokenizer();
  if (!by_token_bytes(tok)) return std::nullopt;
  std::string with_prompt;
  runtime::Encoding all;
  try {
    with_prompt = render(n, true);
    if (with_prompt.size() == text.size() || !starts_with(with_prompt, text)) return std::nullopt;
    all =
        encode(tail.index, tail.begin, fitting(core, std::string_view(with_prompt).substr(tail.begin), render.caller));
  } catch (const Error&) {
    return std::nullopt;
  }
  const std::string_view both = std::string_view(with_prompt).substr(tail.begin);
  const std::optional<std::size_t> before = tokens_before(all.bytes, both, text.size() - tail.begin);
  if (!before) return std::nullopt;
  std::vector<int64_t> prompt(all.ids.begin() + static_cast<std::ptrdiff_t>(*before), all.ids.end());
  all.ids.resize(*before);
  all.bytes.resize(*before);
  tail.tokens = std::move(all);
  return prompt;
}

}  // namespace

namespace detail {

void set_cut_by_token_bytes(bool on) { cut_by_token_bytes.store(on, std::memory_order_relaxed); }
int64_t prefix_encodes_so_far() { return prefix_encodes.load(std::memory_order_relaxed); }

namespace {

Rendering render_units_named(const EngineCore& core, const std::vector<ChatMessage>& messages,
                             const ChatOptions& options, const char* caller) {
  Rendering out;
  (void)core.tokenizer();  // throws, saying so, when the engine has none
  const Chat chat = resolve_chat(core, options);
  out.which = chat.which;
  const std::vector<runtime::ChatMessage> msgs = to_runtime(core, messages, &out.parts, caller);
  const std::size_t n = msgs.size();
  const runtime::ChatRenderOptions ro = render_options(options, caller);
  if (n == 0) {
    // An empty list is an empty window; its generation prompt is what the template writes for no message (as
    // tokenize_chat([]) has it), none where the template refuses an empty list.
    std::optional<Renderer> render;
    try {
      render.emplace(Renderer{chat, chat.tmpl->prepare(msgs, ro), caller});
    } catch (const Error&) {
      return out;
    }
    add_generation_prompt(core, *render, 0, "", 0, 0, out);
    return out;
  }
  const Renderer render{chat, chat.tmpl->prepare(msgs, ro), caller};

  runtime::ClockReads text_reads;  // the whole rendering's strftime_now calls, kept with its memo entry
  const std::string text = chat.tmpl->render_prefix(render.messages, n, false, &text_reads);
  const runtime::Tokenizer& tok = core.tokenizer();
  // Refused here, after the one whole render and before step 2 renders the list's prefixes (one per message,
  // quadratic in the list's length), so a list far past the positions costs one render, not seconds.
  detail::check_text_fits(
      text, core.max_positions(), [&] { return tok.longest_piece_bytes(); },
      std::string(caller) + ": the rendered messages");
  Encoder encode{tok, by_token_bytes(tok) && detail::encodes_incrementally(tok), nullptr, nullptr, nullptr};
  detail::ListKeys keys;
  if (encode.incremental || detail::cuts_memo_applies()) keys = detail::list_keys(*chat.tmpl, ro, msgs);
  detail::ListChoice chose;
  const std::vector<Cut> cuts =
      detail::text_cuts(*chat.tmpl, render.messages, keys, text, text_reads, &out.merged, &chose);
  const std::vector<Marker> marks = find_markers(text, out.parts, caller);
  encode.cuts = &cuts;
  if (encode.incremental) {
    encode.known = detail::known_encodings(keys, tok, chose);
    encode.made = std::make_shared<detail::ListEncodings>();
  }
  std::size_t from = 0;
  for (std::size_t i = 0; i < marks.size(); ++i) {
    add_segment(encode, text, cuts, {from, marks[i].begin, message_at(from, cuts, marks, out.parts), i, std::nullopt},
                out);
    add_part(core, marks[i].part, out);
    from = marks[i].end;
  }
  const std::size_t tail_tokens = out.tokens.size();
  Segment tail{from, text.size(), message_at(from, cuts, marks, out.parts), marks.size(), std::nullopt};
  std::optional<std::vector<int64_t>> prompt = tail_with_prompt(core, render, n, text, tail, encode);
  add_segment(encode, text, cuts, std::move(tail), out);
  if (encode.incremental) detail::put_encodings(keys, tok, encode.made);
  set_end_messages(n, out.spans);
  const int64_t positions = core.max_positions();
  ORBIT_REFUSE_UNLESS(positions <= 0 || static_cast<int64_t>(out.tokens.size()) <= positions,
                      caller << ": the rendered messages are " << out.tokens.size() << " tokens, more than the model's "
                             << positions << " positions");
  if (prompt) {
    out.generation_prompt = std::move(*prompt);
  } else {
    add_generation_prompt(core, render, n, text, from, out.tokens.size() - tail_tokens, out);
  }
  return out;
}

}  // namespace

Rendering render_units(const EngineCore& core, const std::vector<ChatMessage>& messages, const ChatOptions& options,
                       const char* caller) {
  return naming_caller(caller, [&] { return render_units_named(core, messages, options, caller); });
}

std::string unit_label(const std::vector<ChatMessage>& messages, const SyncUnit& u) {
  if (u.first_message >= u.end_message) return "chat";
  const ChatMessage& m = messages[static_cast<std::size_t>(u.first_message)];
  std::string label = m.role;
  if (u.end_message - u.first_message > 1) label += "+" + std::to_string(u.end_message - u.first_message - 1);
  std::string text = m.content;
  for (const ContentPart& p : m.parts) text += p.chunk ? "" : p.text;
  std::string head = text.substr(0, 40);
  for (char& ch : head) {
    if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
  }
  if (!head.empty()) label += ": " + head;
  return label;
}

}  // namespace detail

// ---- Engine ----

std::vector<int64_t> Engine::tokenize_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                           const ChatOptions& options) const {
  const detail::OpHold hold(*core_);
  return encode(*core_, detail::render_text(*core_, messages, add_generation_prompt, options, "tokenize_chat"),
                "tokenize_chat");
}

}  // namespace orbit

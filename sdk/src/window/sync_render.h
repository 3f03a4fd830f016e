// The rendering half of Window::sync (orbit/sync.h, steps 1-3): a message list rendered with the chat
// template and cut into units, shared by window_sync_render.cpp (which makes it from step 1's template and
// messages, window_sync_chat.cpp) and window_sync.cpp (which diffs the units against the window).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "orbit/chunk.h"
#include "orbit/sync.h"

namespace orbit::detail {

class EngineCore;

// How an error names a chunk part: "messages[i].content[j]".
inline std::string part_field(std::size_t message, std::size_t part) {
  return "messages[" + std::to_string(message) + "].content[" + std::to_string(part) + "]";
}

// A chunk part of the list: messages[message].parts[index].
struct PartRef {
  int64_t message = 0;
  int64_t index = 0;
  ChunkRef chunk;
};

struct Span {
  int64_t first_message = 0;
  int64_t end_message = 0;
  std::size_t begin = 0;  // tokens [begin, end) of the rendering
  std::size_t end = 0;
  int64_t part = -1;  // a chunk part: its index in Rendering::parts
};

struct Rendering {
  std::string which;
  std::vector<int64_t> tokens;  // chunk parts in place (kEmbeddingRow for embedding rows)
  std::vector<Span> spans;
  std::vector<PartRef> parts;
  std::vector<int64_t> generation_prompt;
  bool generation_prompt_exact = true;
  int64_t merged = 0;
};

// The rendering of `messages` cut into units (sync.h, steps 1-3; chunk parts split it into text segments).
// Errors name `caller`, the function the user called (sync, plan_sync, prepare_sync).
Rendering render_units(const EngineCore& core, const std::vector<ChatMessage>& messages, const ChatOptions& options,
                       const char* caller);

// For tests only: whether step 3 decides the cuts of a prefix-stable tokenizer (runtime::Tokenizer::
// prefix_stable) from the bytes of the rendering's tokens (true, the default) or encodes the text before
// every cut, as it does for other tokenizers. Both give the same Rendering (tests/cpp/test_sync_cuts.cpp
// checks it). Process-wide; safe to call from any thread.
void set_cut_by_token_bytes(bool on);
// For tests only: how many times step 3 has encoded the text before a cut in this process (what the token
// bytes save).
int64_t prefix_encodes_so_far();

// For tests and benchmarks only: whether step 2 reads what it can from the renders of earlier lists (the cuts
// memo, sync_memo.h; true, the default) or renders every prefix of every list. Both give the same Rendering
// (tests/cpp/test_sync_memo.cpp checks it). clear_cuts_memo forgets every list. Process-wide; safe to call
// from any thread.
void set_cuts_memo(bool on);
void clear_cuts_memo();
// For tests only: how many prefixes of lists step 2 has rendered in this process (what the memo saves), and
// how many it read from the spans of a latest list (sync_memo.h: a list trimmed or summarized at its start)
// and kept after the check.
int64_t prefix_renders_so_far();
int64_t prefix_spans_so_far();

// For tests and benchmarks only: whether step 3 encodes a text segment incrementally from the earlier list's
// (sync_encode.h; true, the default, for a prefix-stable tokenizer while set_cut_by_token_bytes is on) or
// encodes each whole. Both give the same Rendering (tests/cpp/test_sync_encode.cpp checks it).
// clear_encode_memo forgets every list's encodings. Process-wide; safe to call from any thread.
void set_incremental_encode(bool on);
void clear_encode_memo();
// For tests only: how many tokens step 3 has taken from earlier lists' encodings in this process.
int64_t tokens_reused_so_far();

// A chunk's label: the role(s) and the start of the first message's text.
std::string unit_label(const std::vector<ChatMessage>& messages, const SyncUnit& u);

}  // namespace orbit::detail

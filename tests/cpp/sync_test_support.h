// Helpers the Window::sync tests share (test_sync.cpp, test_sync_parts.cpp, test_sync_rerender.cpp): the bundled
// TinyStories-656K engine, the chat templates the tests pass, messages, the check that a window is its rendering
// (or given tokens), the window's prefix spans, random sentences.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "orbit/engine.h"
#include "orbit/planner/prefix_ledger.h"
#include "orbit_catch.h"

namespace orbit::test::sync_support {

inline const std::string kModel = std::string(ORBIT_MODELS_DIR) + "/tinystories-656k";

// Every message starts with the BOS special token (as ChatML's <|im_start|> does), so every message
// boundary is a token boundary. The space before it matters: the tokenizer's added tokens are normalized
// (normalized: true), so what it matches is the normalized "▁<|start_story|>"; without a space before it
// the text "<|start_story|>" is spelled out in pieces ("<|", "start_story", "|>") and BPE may merge across.
inline const char* kTemplate =
    "{% for message in messages %} <|start_story|>{{ message.role }}: {{ message.content }}{% endfor %}"
    "{% if add_generation_prompt %} <|start_story|>assistant:{% endif %}";

// Messages run on into each other with a plain space: the tokenizer (no pre-tokenizer; "▁" starts a word)
// merges the space with the next message's first word, so these boundaries are not token boundaries.
inline const char* kRunOnTemplate =
    "{% for message in messages %}{{ message.role }}: {{ message.content }} {% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

inline std::shared_ptr<Engine> open_engine() {
  EngineOptions o;
  o.model = kModel;
  o.pool_bytes = int64_t{64} << 20;
  o.page_size = 16;
  o.background = BackgroundMode::kInline;  // patches stored at once: runs are deterministic
  return Engine::open(o);
}

inline SyncOptions options(const char* tmpl = kTemplate, int64_t chunk_min_tokens = 24) {
  SyncOptions o;
  o.chat.chat_template = tmpl;
  o.chunk_min_tokens = chunk_min_tokens;
  return o;
}

inline ChatMessage msg(const std::string& role, const std::string& content) {
  ChatMessage m;
  m.role = role;
  m.content = content;
  return m;
}

// The window's instances, in order, are `expected`.
inline void require_window_is_tokens(Engine& engine, const Window& w, const std::vector<int64_t>& expected) {
  int64_t pos = 0;
  for (const InstanceInfo& i : w.instances()) {
    REQUIRE(i.position == pos);
    REQUIRE(pos + i.length <= static_cast<int64_t>(expected.size()));
    const std::vector<int64_t> slice(expected.begin() + pos, expected.begin() + pos + i.length);
    if (i.is_turn) {
      REQUIRE(i.turn_tokens == slice);
    } else {
      REQUIRE(i.chunk.key == engine.add_tokens(slice).key);  // content keys: equal keys, equal tokens
    }
    pos += i.length;
  }
  REQUIRE(pos == static_cast<int64_t>(expected.size()));
}

// (a): the window's instances, in order, are the tokens of the rendering.
inline void require_window_is_rendering(Engine& engine, const Window& w, const std::vector<ChatMessage>& messages,
                                        const SyncOptions& o) {
  require_window_is_tokens(engine, w, engine.tokenize_chat(messages, false, o.chat));
}

// A prefix cache that keeps only the last sequence read (one conversation's KV, as a server slot keeps
// it): a read forwards the instances after the longest prefix it shares with the previous read.
class LastRead {
 public:
  int64_t read(const std::vector<planner::PrefixSpan>& spans) {
    std::size_t same = 0;
    while (same < spans.size() && same < last_.size() && spans[same].prefix == last_[same].prefix) ++same;
    int64_t tokens = 0;
    for (std::size_t i = same; i < spans.size(); ++i) tokens += spans[i].tokens;
    last_ = spans;
    return tokens;
  }

 private:
  std::vector<planner::PrefixSpan> last_;
};

inline std::vector<planner::PrefixSpan> spans_of(const Window& w) {
  std::vector<planner::PrefixSpan> spans;
  uint64_t prefix = 0;
  for (const InstanceInfo& i : w.instances()) {
    prefix = (prefix ^ std::hash<std::string>{}(i.chunk.key)) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
    spans.push_back({prefix, i.length});
  }
  return spans;
}

inline const std::vector<std::string> kWords = {
    "the",  "little", "girl", "boy",  "dog",  "cat",  "ball", "tree",  "park",   "sun",  "happy",
    "sad",  "big",    "red",  "play", "run",  "jump", "saw",  "found", "wanted", "said", "mom",
    "dad",  "friend", "toy",  "box",  "bird", "sky",  "went", "home",  "day",    "fun",  "good",
    "nice", "loved",  "to",   "and",  "with", "was",  "a",    "she",   "he",     "they"};

inline std::string sentence(std::mt19937_64& rng, int words) {
  std::string s;
  for (int i = 0; i < words; ++i) {
    if (i > 0) s += ' ';
    s += kWords[rng() % kWords.size()];
  }
  return s + ".";
}

}  // namespace orbit::test::sync_support

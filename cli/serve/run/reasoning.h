// A reasoning model's thinking read out of its answer (`orbit serve --reasoning-parser NAME`), as vLLM's and
// SGLang's reasoning parsers and llama.cpp's --reasoning-format read it: the text between `<think>` and
// `</think>` is the answer's reasoning (chat: message.reasoning_content, delta.reasoning_content; Responses: a
// reasoning item), the text after it the answer (content, tool calls, JSON):
//
//   generation prompt  "<|im_start|>assistant\n"      answer "<think>\nPlan.\n</think>\n\nHello"
//                                                      reasoning "Plan."   content "Hello"
//   generation prompt  "<｜Assistant｜><think>\n"      answer "Plan.\n</think>\n\nHello"  (begins inside)
//   generation prompt  "...<think>\n\n</think>\n\n"   answer "Hello"  (thinking turned off: all content)
//
// Where the answer begins (ReasoningStart): inside the reasoning when the generation prompt leaves a
// `<think>` open (its last `<think>` after its last `</think>`); in the answer when the prompt closed one
// (Qwen3's enable_thinking false); else as the parser's name says: `deepseek_r1` inside (DeepSeek-R1's
// distills, trained after a `<think>\n` their older templates did not write), `qwen3` in the answer. In
// either case an answer whose first text (leading whitespace aside) is `<think>` opens the reasoning there.
// Only the first reasoning block is read: a `<think>` later in the answer is content. The reasoning is
// trimmed of whitespace at both ends, and the whitespace right after `</think>` is dropped (Qwen3's
// template writes `<think>\n...\n</think>\n\n` around it and strips it when the reasoning is sent back).
// An answer that ends before `</think>` (max_tokens) is all reasoning, its content empty.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace orbit::serve {

enum class ReasoningFormat {
  kNone,        // no parser: the answer is content, as written
  kDeepSeekR1,  // "deepseek_r1": begins inside the reasoning unless the generation prompt closed it
  kQwen3,       // "qwen3": begins in the answer unless the prompt left `<think>` open or the answer opens it
};

// The tags around the reasoning.
inline constexpr std::string_view kReasoningOpen = "<think>";
inline constexpr std::string_view kReasoningClose = "</think>";

// The format `name` names ("none", "deepseek_r1", "qwen3"), or nullopt.
std::optional<ReasoningFormat> reasoning_format_named(std::string_view name);
// The names reasoning_format_named takes, comma-separated, for errors and --help.
std::string reasoning_format_names();

// Whether an answer generated after `generation_prompt` (the rendered text the model reads last) begins inside
// the reasoning (see above). False for kNone.
bool starts_in_reasoning(ReasoningFormat format, std::string_view generation_prompt);
// Whether such an answer begins in the answer but may open the reasoning itself: the prompt has neither tag
// and the parser's name says the answer begins outside (qwen3; Qwen3's template with thinking on leaves
// `<think>` to the model). False where the prompt closed the reasoning (thinking turned off) and for kNone.
bool may_open_reasoning(ReasoningFormat format, std::string_view generation_prompt);

// What push() or finish() lets out: the reasoning's next piece, then the content's.
struct ReasoningPieces {
  std::string reasoning;
  std::string content;
};

// Splits an answer as it is generated. The pieces let out, concatenated, are the whole answer's reasoning and
// content (split_reasoning's); a tag split across deltas is held back until it is whole or cannot be one, so
// no piece of `<think>` or `</think>` ever reaches either stream, nor the whitespace the split drops.
// Not thread-safe: one choice of one request owns it.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool in_reasoning);

  ReasoningPieces push(std::string_view delta);
  // The answer ended: what was held back (a partial tag at the end of the reasoning is its text).
  ReasoningPieces finish();
  // The bytes of the answer up to the end of `</think>` (the reasoning and its tags), or, while the reasoning
  // has not ended, nullopt (every byte so far is reasoning). 0 when the answer has no reasoning.
  std::optional<std::size_t> reasoning_end() const;
  bool had_reasoning() const { return opened_; }  // the reasoning began (so far)

 private:
  enum class State {
    kMayOpen,     // before the answer's first text: `<think>` may still open the reasoning
    kReasoning,   // inside the reasoning
    kAfterClose,  // `</think>` read: whitespace dropped until the content's first byte
    kContent,     // the rest is content
  };
  void step(ReasoningPieces& out);
  void reason(ReasoningPieces& out, bool at_end);

  State state_;
  bool fallback_reasoning_;      // kMayOpen resolves to the reasoning (true) or the content
  bool opened_ = false;          // the reasoning began (in the prompt or at an open tag)
  bool reasoning_text_ = false;  // some reasoning text went out (leading whitespace is dropped before it)
  std::string held_;             // text not let out yet
  std::size_t consumed_ = 0;     // bytes of the answer before held_
  std::optional<std::size_t> end_;
};

// The whole answer split at once: a splitter pushed `answer` and finished.
struct ReasoningSplit {
  std::string reasoning;
  std::string content;
  std::optional<std::size_t> reasoning_end;  // ReasoningSplitter::reasoning_end
};
ReasoningSplit split_reasoning(std::string_view answer, bool in_reasoning);

}  // namespace orbit::serve

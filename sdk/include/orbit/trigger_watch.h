// Where a constraint's trigger (GenerateOptions::constraint_trigger) appears in a run's free text, outside a
// leading block the trigger does not count in (GenerateOptions::constraint_trigger_block): a reasoning model's
// `<think>...</think>`, inside which a tool call's mark is thought about, not written as a call.
//
//   block {"", "</think>"}          text "Plan <tool_call> maybe.</think>\n<tool_call>{..."
//                                                                      ^ the trigger counts from here
//   block {"<think>", "</think>"}   text "  <think>a <tool_call></think><tool_call>{..."   ^ from here
//                                   text "<tool_call>{..."  (no open tag at the start)   ^ from the first byte
//   block {"", ""}                  no block: the first trigger counts (the behaviour without one)
//
// The block is a leading one: `open` counts only as the text's first bytes (leading ASCII whitespace aside),
// and once `close` ended it, a later `open` is text like any other. An empty trigger (a constraint from the
// first byte, GenerateOptions::constraint_trigger empty, past a block the model may open) counts at the first
// byte outside the block: right after `close`, or at the text's first byte where it does not begin with `open`
// (its leading whitespace included: the text " \n{" decides at '{' and counts from ' '; " <think>" opens).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace orbit {

struct TriggerBlock {
  // "": the text begins inside the block (the prompt opened it); else the block is there only where the text
  // begins (leading whitespace aside) with `open`, and the trigger counts from the first byte where it does not.
  std::string open;
  std::string close;  // "": no block (and `open` must be "")
  bool empty() const { return close.empty(); }
};

// Fed a run's text piece by piece. A value: copy it to try a piece without taking it.
class TriggerWatch {
 public:
  // Throws orbit::Error when `trigger` and the block are both empty, or block.open is set without block.close.
  TriggerWatch(std::string trigger, TriggerBlock block);

  // Appends `piece` to the text; once the trigger has appeared outside the block, the text from its first
  // byte on (within the pieces pushed so far; later pieces are the caller's), else nullopt. Not to be pushed
  // again after it answered.
  std::optional<std::string> push(std::string_view piece);

  // Where the trigger first counts in a whole `text` (a byte offset), or nullopt.
  static std::optional<std::size_t> find(std::string_view text, const std::string& trigger, const TriggerBlock& block);

  // The text so far may still open the block (held() is all of it: whitespace, then a proper prefix of
  // block.open); the next piece decides.
  bool may_open() const { return phase_ == Phase::kMayOpen; }
  const std::string& held() const { return held_; }

 private:
  enum class Phase {
    kMayOpen,   // the text so far is whitespace and a prefix of block.open: the block may still open
    kInBlock,   // inside the block: the trigger does not count until block.close
    kWatching,  // outside the block: the trigger counts
  };
  std::string trigger_;
  TriggerBlock block_;
  Phase phase_;
  // Text not yet past: in kMayOpen all of it; else its last bytes, fewer than the string looked for (where
  // it may begin).
  std::string held_;
};

}  // namespace orbit

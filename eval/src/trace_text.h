// Story-like text for generated traces (make_trace's agent patterns): sentences built from word lists and
// templates, in the simple past-tense register of the children's stories the bundled model was trained on,
// so chunks, turns and queries are text the model reads as text (its own distribution), not random ids.
//
// Every piece is a pure function of the generator's seed stream: the same seed gives the same text on
// every platform. Each role reads like what an agent of that pattern would hold: a page a browsing agent
// sees, a file a coding agent reads, a frame description, a retrieved document, a question.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "trace_internal.h"

namespace orbit::trace_detail {

enum class TextRole {
  kSystem,       // the agent's instructions
  kPage,         // a browsed page
  kAction,       // an agent's action (click, open, scroll)
  kObservation,  // what the action showed
  kFile,         // a file read by a coding agent
  kToolCall,     // a tool invocation
  kToolOutput,   // its output
  kFrame,        // a video frame described in words
  kDocument,     // a document of a shared set or a retrieval corpus
  kQuestion,     // a question about the window's contents
  kSubtask,      // a sub-agent's task
};

class StoryText {
 public:
  // `count`: tokens the model's tokenizer gives a text (no BOS); unset, an upper bound (bytes + 1).
  StoryText(uint64_t seed, std::function<int64_t(const std::string&)> count);

  // Text of `role`: a role-specific opening sentence, then story sentences about the same character, thing
  // and place, added until the text is at least `tokens` long by `count` (one sentence at least).
  std::string make(TextRole role, int64_t target);
  int64_t tokens(const std::string& text) const;

 private:
  std::string sentence(TextRole role, const std::string& name, const std::string& thing, const std::string& place);
  const char* pick(const char* const* list, std::size_t n);

  Rng rng_;
  std::function<int64_t(const std::string&)> count_;
  std::size_t system_line_ = 0;
};

}  // namespace orbit::trace_detail

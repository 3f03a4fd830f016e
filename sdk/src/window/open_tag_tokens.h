// The tokens that can keep a block's open string (GenerateOptions::constraint_trigger_block.open, such as
// "<think>") possible, or open the block, at a step where the text may still open it (the Sampler's
// open-or-answer step, sampler.h). Every other token decides the text is the constrained answer, so the
// constraint's mask alone judges it; only these few need the TriggerWatch. Computed once per vocabulary and
// open string (a walk of the vocabulary) and cached.
//
// A token is listed when its bytes are not empty and either, past their leading ASCII whitespace, are a prefix
// of `open` or begin with it (the text so far is whitespace), or, for some k in [1, open.size()), are a
// prefix of open[k:] or begin with it (the text so far ends in open's first k bytes). A superset of the tokens
// that keep the block possible from any such text: the TriggerWatch decides each of them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "orbit/constraint.h"

namespace orbit::detail {

struct OpenTagTokens {
  // (token, its bytes) in id order: `later` by TokenVocabulary::bytes; `first` where the token starts the
  // text (TokenVocabulary::at_start's bytes for the tokens it lists, the others' own bytes).
  std::vector<std::pair<int64_t, std::string>> later, first;
};

// Cached per vocabulary (while it lives) and open string; thread-safe. `open` must not be empty.
std::shared_ptr<const OpenTagTokens> open_tag_tokens(const std::shared_ptr<const TokenVocabulary>& vocabulary,
                                                     const std::string& open);

}  // namespace orbit::detail

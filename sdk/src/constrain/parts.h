// What a Constraint (orbit/constraint.h) holds: its grammar, a matcher over it, and one mask cache per
// vocabulary it has been used with.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "constrain/grammar.h"
#include "constrain/matcher.h"
#include "constrain/token_masks.h"
#include "orbit/constraint.h"

namespace orbit::constrain {

// An estimate of the bytes a grammar holds: its nodes and every container in them, by capacity. A DFA shared
// with other grammars is counted whole here (an over-estimate, never an under-estimate).
std::size_t grammar_bytes(const Grammar& grammar);

struct ConstraintParts {
  explicit ConstraintParts(Grammar g)
      : grammar(std::move(g)), matcher(grammar), grammar_bytes_(grammar_bytes(grammar)) {}
  ConstraintParts(const ConstraintParts&) = delete;
  ConstraintParts& operator=(const ConstraintParts&) = delete;

  // The mask cache for `vocabulary`, made on first use. A constraint keeps the last few vocabularies it
  // served alive (their caches point into them).
  std::shared_ptr<MaskCache> cache_for(const TokenVocabulary& vocabulary, const VocabTrie& trie) const;
  // The bytes held: the grammar's (grammar_bytes) and every mask cache's (MaskCache::bytes).
  std::size_t bytes() const;

  const Grammar grammar;
  const Matcher matcher;  // refers to `grammar`: the parts never move (held by unique_ptr)

 private:
  static constexpr std::size_t kMaxVocabularies = 4;
  const std::size_t grammar_bytes_;  // the grammar never changes: counted once
  mutable std::mutex mutex_;
  mutable std::vector<std::pair<std::shared_ptr<const TokenVocabulary>, std::shared_ptr<MaskCache>>> caches_;
};

// The private parts of the public classes, for the sources in this folder.
struct Access {
  static const ConstraintParts& parts(const Constraint& c) { return *c.parts_; }
  static std::shared_ptr<const Constraint> make(std::unique_ptr<ConstraintParts> parts) {
    return std::shared_ptr<const Constraint>(new Constraint(std::move(parts)));
  }
  static const VocabTrie& trie(const TokenVocabulary& v) { return *v.trie_; }
};

}  // namespace orbit::constrain

// What a Constraint holds (parts.h): its mask cache per vocabulary, and the bytes it holds, its grammar's and its
// masks' (Constraint::memory_bytes, what ConstraintCache counts).
#include <memory>
#include <mutex>
#include <vector>

#include "constrain/parts.h"

namespace orbit {

namespace constrain {

std::shared_ptr<MaskCache> ConstraintParts::cache_for(const TokenVocabulary& vocabulary, const VocabTrie& trie) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [v, cache] : caches_) {
    if (v.get() == &vocabulary) return cache;
  }
  if (caches_.size() >= kMaxVocabularies) caches_.erase(caches_.begin());
  caches_.emplace_back(vocabulary.shared_from_this(), std::make_shared<MaskCache>(grammar, trie));
  return caches_.back().second;
}

namespace {

template <typename T>
std::size_t held(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

std::size_t held(const std::vector<bool>& v) { return (v.capacity() + 7) / 8; }

std::size_t dfa_bytes(const ByteDfa& d) {
  std::size_t n = sizeof(ByteDfa) + held(d.edges) + held(d.accepting) + held(d.char_end) + held(d.min_bytes) +
                  held(d.min_chars) + held(d.texts_ahead) + held(d.chars_ahead) + held(d.loop_chars);
  for (const auto& edges : d.edges) n += held(edges);
  return n;
}

std::size_t node_bytes(const Node& node) {
  std::size_t n = node.literal.capacity() + held(node.trie.nodes) + held(node.children) + held(node.required) +
                  held(node.key_bytes) + held(node.next_required) + held(node.required_left) + held(node.rest) +
                  held(node.after_comma);
  for (const ByteTrie::Node& t : node.trie.nodes) n += held(t.children) + held(t.values_below) + held(t.lengths_below);
  if (node.dfa) n += dfa_bytes(*node.dfa);
  return n;
}

}  // namespace

std::size_t grammar_bytes(const Grammar& grammar) {
  std::size_t n = sizeof(Grammar) + held(grammar.nodes) + grammar.description.capacity();
  for (const Node& node : grammar.nodes) n += node_bytes(node);
  return n;
}

std::size_t ConstraintParts::bytes() const {
  std::size_t n = sizeof(ConstraintParts) + grammar_bytes_;
  std::lock_guard<std::mutex> lock(mutex_);
  n += held(caches_);
  for (const auto& entry : caches_) n += sizeof(MaskCache) + entry.second->bytes();
  return n;
}

}  // namespace constrain

std::size_t Constraint::memory_bytes() const { return parts_->bytes(); }

}  // namespace orbit

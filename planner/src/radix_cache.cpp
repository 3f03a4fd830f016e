#include <algorithm>

#include "orbit/common/error.h"
#include "orbit/planner/prefix_cache.h"

namespace orbit::planner {

RadixCache::RadixCache(const PrefixCacheOptions& options) : capacity_(options.capacity_tokens) {
  ORBIT_CHECK(options.capacity_tokens >= 0,
              "RadixCache: capacity_tokens = " << options.capacity_tokens << " must be >= 0 (0 = unbounded)");
  nodes_.emplace_back();
  nodes_[0].live = true;
}

int32_t RadixCache::make_node(int32_t parent, std::vector<int64_t> label, uint64_t clock) {
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = nodes_[id];
  n.parent = parent;
  n.label = std::move(label);
  n.children.clear();
  n.clock = clock;
  n.live = true;
  return id;
}

void RadixCache::add_child(int32_t parent, int32_t child) {
  nodes_[parent].children[nodes_[child].label.front()] = child;
  nodes_[child].parent = parent;
}

int32_t RadixCache::split(int32_t node, std::size_t keep) {
  const int32_t parent = nodes_[node].parent;
  std::vector<int64_t> head(nodes_[node].label.begin(), nodes_[node].label.begin() + static_cast<std::ptrdiff_t>(keep));
  const int32_t mid = make_node(parent, std::move(head), nodes_[node].clock);
  std::vector<int64_t>& tail = nodes_[node].label;
  tail.erase(tail.begin(), tail.begin() + static_cast<std::ptrdiff_t>(keep));
  add_child(parent, mid);  // replaces node under the same first token
  add_child(mid, node);
  return mid;
}

void RadixCache::touch(int32_t node, uint64_t clock) {
  Node& n = nodes_[node];
  if (n.children.empty()) {
    leaves_.erase({n.clock, node});
    leaves_.insert({clock, node});
  }
  n.clock = clock;
}

PrefixCacheRead RadixCache::read(const std::vector<int64_t>& tokens, std::size_t prompt_tokens, PrefixRead kind) {
  ORBIT_CHECK(prompt_tokens <= tokens.size(), "RadixCache::read: prompt_tokens = " << prompt_tokens
                                                                                   << " past the read's "
                                                                                   << tokens.size() << " tokens");
  const uint64_t now = ++clock_;
  int32_t node = 0;
  std::size_t pos = 0;
  while (pos < tokens.size()) {
    const auto it = nodes_[node].children.find(tokens[pos]);
    if (it == nodes_[node].children.end()) break;
    int32_t child = it->second;
    const std::vector<int64_t>& label = nodes_[child].label;
    std::size_t k = 1;
    while (k < label.size() && pos + k < tokens.size() && label[k] == tokens[pos + k]) ++k;
    if (k < label.size()) child = split(child, k);  // only the matched tokens are touched
    touch(child, now);
    node = child;
    pos += k;
  }
  PrefixCacheRead out;
  // A model call recomputes the prompt's last token for its logits, held or not.
  const std::size_t reusable = kind == PrefixRead::kLogits && prompt_tokens > 0 ? prompt_tokens - 1 : prompt_tokens;
  out.reused = static_cast<int64_t>(std::min(pos, reusable));
  out.forwarded = static_cast<int64_t>(prompt_tokens) - out.reused;
  if (pos < tokens.size()) {
    if (node != 0 && nodes_[node].children.empty()) leaves_.erase({nodes_[node].clock, node});
    const int32_t leaf =
        make_node(node, std::vector<int64_t>(tokens.begin() + static_cast<std::ptrdiff_t>(pos), tokens.end()), now);
    add_child(node, leaf);
    leaves_.insert({now, leaf});
    size_ += static_cast<int64_t>(tokens.size() - pos);
  }
  if (capacity_ > 0 && size_ > capacity_) out.evicted = evict(size_ - capacity_);
  return out;
}

// Trims the tail of the oldest leaf, a token at a time, until `tokens` are gone.
int64_t RadixCache::evict(int64_t tokens) {
  int64_t done = 0;
  while (done < tokens) {
    ORBIT_CHECK(!leaves_.empty(), "RadixCache: " << size_ << " tokens held but no leaf to evict");
    const int32_t leaf = leaves_.begin()->second;
    Node& n = nodes_[leaf];
    const int64_t first = n.label.front();
    const int64_t take = std::min<int64_t>(tokens - done, static_cast<int64_t>(n.label.size()));
    n.label.resize(n.label.size() - static_cast<std::size_t>(take));
    done += take;
    size_ -= take;
    if (!n.label.empty()) continue;
    leaves_.erase(leaves_.begin());
    const int32_t parent = n.parent;
    n.live = false;
    n.children.clear();
    free_.push_back(leaf);
    nodes_[parent].children.erase(first);
    if (parent != 0 && nodes_[parent].children.empty()) leaves_.insert({nodes_[parent].clock, parent});
  }
  return done;
}

int64_t RadixCache::match(const std::vector<int64_t>& tokens) const {
  int32_t node = 0;
  std::size_t pos = 0;
  while (pos < tokens.size()) {
    const auto it = nodes_[node].children.find(tokens[pos]);
    if (it == nodes_[node].children.end()) break;
    const std::vector<int64_t>& label = nodes_[it->second].label;
    std::size_t k = 1;
    while (k < label.size() && pos + k < tokens.size() && label[k] == tokens[pos + k]) ++k;
    pos += k;
    if (k < label.size()) break;
    node = it->second;
  }
  return static_cast<int64_t>(pos);
}

void RadixCache::verify_integrity() const {
  ORBIT_CHECK(nodes_[0].live && nodes_[0].label.empty() && nodes_[0].parent == -1, "RadixCache: bad root");
  int64_t held = 0;
  std::size_t leaves = 0;
  for (std::size_t i = 1; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.live) continue;
    const int32_t id = static_cast<int32_t>(i);
    ORBIT_CHECK(!n.label.empty(), "RadixCache: node " << i << " has an empty label");
    ORBIT_CHECK(n.parent >= 0 && static_cast<std::size_t>(n.parent) < nodes_.size() && nodes_[n.parent].live,
                "RadixCache: node " << i << " has no live parent");
    const Node& p = nodes_[n.parent];
    const auto it = p.children.find(n.label.front());
    ORBIT_CHECK(it != p.children.end() && it->second == id,
                "RadixCache: node " << i << " is not its parent's child under its first token");
    ORBIT_CHECK(n.parent == 0 || n.clock <= p.clock, "RadixCache: node " << i << " read after its parent");
    for (const auto& [first, child] : n.children) {
      ORBIT_CHECK(nodes_[child].live && nodes_[child].parent == id && nodes_[child].label.front() == first,
                  "RadixCache: node " << i << " lists a child that is not its own");
    }
    if (n.children.empty()) {
      ORBIT_CHECK(leaves_.count({n.clock, id}) == 1, "RadixCache: leaf " << i << " missing from the leaf index");
      ++leaves;
    }
    held += static_cast<int64_t>(n.label.size());
  }
  ORBIT_CHECK(leaves == leaves_.size(),
              "RadixCache: the leaf index holds " << leaves_.size() << " entries, " << leaves << " leaves are live");
  ORBIT_CHECK(held == size_, "RadixCache: size " << size_ << " but labels hold " << held);
  ORBIT_CHECK(capacity_ == 0 || size_ <= capacity_, "RadixCache: " << size_ << " tokens past capacity " << capacity_);
}

}  // namespace orbit::planner

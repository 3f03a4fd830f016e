// Arrays and tuples (prefixItems, or draft-07's list of items) compiled into grammar nodes
// (schema_compiler.h); objects and maps are schema_objects.cpp's.
#include <algorithm>
#include <string>
#include <vector>

#include "constrain/schema_compiler.h"
#include "orbit/common/error.h"

namespace orbit::constrain::schema {

int32_t SchemaCompiler::compile_member(const Json& s, const std::string& path) {
  ++containers_;
  try {
    const int32_t node = compile(s, path);
    --containers_;
    return node;
  } catch (...) {
    --containers_;
    throw;
  }
}

int32_t SchemaCompiler::compile_array(const Json& s, const std::string& path) {
  if (s.contains("prefixItems")) return compile_tuple(s, s.at("prefixItems"), "prefixItems", path);
  if (s.contains("items") && s.at("items").is_array()) return compile_tuple(s, s.at("items"), "items", path);
  ORBIT_CHECK(!s.contains("additionalItems"), path << ": 'additionalItems' applies only beside a list of items");
  const int64_t min = s.contains("minItems") ? count_of(s, "minItems", path) : 0;
  const int64_t max = s.contains("maxItems") ? count_of(s, "maxItems", path) : std::max(min, limits_.max_array_items);
  ORBIT_CHECK(min <= max, path << ": minItems " << min << " is above maxItems " << max);
  const int32_t item =
      s.contains("items") ? compile_member(s.at("items"), path + ".items") : add_any_value(g_, limits_);
  if (s.contains("uniqueItems")) {
    const Json& unique = s.at("uniqueItems");
    ORBIT_CHECK(unique.is_boolean(), path << ".uniqueItems: expected true or false, not " << brief(unique));
    if (unique.get<bool>()) return compile_unique(item, min, max, s.contains("maxItems"), path);
  }
  Node n;
  n.kind = NodeKind::kArray;
  n.space = limits_.whitespace == Whitespace::kSingleSpace;
  n.min_count = min;
  n.max_count = max;
  n.children = {item};
  return g_.add(std::move(n));
}

// A tuple: its listed items in order, then, unless `closed` (items false beside prefixItems, additionalItems
// false beside draft-07's list) forbids more, items of that schema (absent or true: any value). Its lengths run
// from minItems (0 when absent) to maxItems (the listed count when closed, else as many as an array without
// maxItems holds). Written as '[', the first item, then each further one as ',' item, the optional ones each
// opening a choice of stopping there (one optional space after '[' and each ',' as arrays have).
int32_t SchemaCompiler::compile_tuple(const Json& s, const Json& items, const std::string& key,
                                      const std::string& path) {
  ORBIT_CHECK(items.is_array(), path << "." << key << ": expected a list of schemas, not " << brief(items));
  const auto listed = static_cast<int64_t>(items.size());
  const std::string tail_key = key == "items" ? "additionalItems" : "items";
  for (const auto& [k, v] : s.items()) {
    ORBIT_CHECK(k == key || k == tail_key || k == "minItems" || k == "maxItems" || k == "type" || is_annotation(k),
                path << ": '" << k << "' beside '" << key << "' is not supported");
  }
  const bool closed = s.contains(tail_key) && s.at(tail_key) == Json(false);
  const int64_t min = s.contains("minItems") ? count_of(s, "minItems", path) : 0;
  const int64_t most = closed ? listed : std::max({min, listed, limits_.max_array_items});
  const int64_t max = s.contains("maxItems") ? std::min(count_of(s, "maxItems", path), most) : most;
  ORBIT_CHECK(min <= max, path << ": minItems " << min << " is above the " << max << " items "
                               << (closed && max == listed ? "the closed tuple lists" : "maxItems allows"));
  std::vector<int32_t> nodes;
  for (int64_t i = 0; i < std::min(listed, max); ++i) {
    nodes.push_back(
        compile_member(items[static_cast<std::size_t>(i)], path + "." + key + "[" + std::to_string(i) + "]"));
  }
  if (max > listed) {
    const bool any = !s.contains(tail_key) || s.at(tail_key) == Json(true);
    nodes.push_back(any ? add_any_value(g_, limits_) : compile_member(s.at(tail_key), path + "." + tail_key));
  }
  return add_tuple(nodes, min, max);
}

namespace {

// A kChoice of `a` and `b`.
int32_t add_either(Grammar& g, int32_t a, int32_t b) {
  Node n;
  n.kind = NodeKind::kChoice;
  n.children = {a, b};
  return g.add(std::move(n));
}

}  // namespace

// '[' node[0] ',' node[1] ... ']' of min to max items, node i at position i (the last node repeated past the
// list). Built from the end: each position's rest is "',' item, then the next rest", a choice with "" from min on.
int32_t SchemaCompiler::add_tuple(const std::vector<int32_t>& nodes, int64_t min, int64_t max) {
  const bool space = limits_.whitespace == Whitespace::kSingleSpace;
  const int32_t gap = space ? add_literal_set(g_, {" "}) : -1;
  const int32_t none = add_literal(g_, "");
  const auto mark = [&](std::vector<int32_t>& seq, const std::string& text) {
    seq.push_back(add_literal(g_, text));
    if (space) seq.push_back(add_either(g_, gap, none));
  };
  int32_t rest = none;
  for (int64_t i = max - 1; i >= 0; --i) {
    ORBIT_CHECK(g_.nodes.size() < kMaxNodes, "the schema is too large (over " << kMaxNodes << " nodes)");
    Node seq;
    seq.kind = NodeKind::kSequence;
    if (i > 0) mark(seq.children, ",");
    seq.children.push_back(nodes[static_cast<std::size_t>(std::min<int64_t>(i, nodes.size() - 1))]);
    if (rest != none) seq.children.push_back(rest);
    rest = g_.add(std::move(seq));
    if (i >= min) rest = add_either(g_, rest, none);
  }
  Node whole;
  whole.kind = NodeKind::kSequence;
  mark(whole.children, "[");
  whole.children.push_back(rest);
  whole.children.push_back(add_literal(g_, "]"));
  return g_.add(std::move(whole));
}

namespace {

// The strings of `trie` in the order of their values (the order they were listed in).
std::vector<std::string> trie_strings(const ByteTrie& trie) {
  std::vector<std::pair<int32_t, std::string>> found;
  std::vector<std::pair<int32_t, std::string>> todo{{0, ""}};
  while (!todo.empty()) {
    auto [at, text] = std::move(todo.back());
    todo.pop_back();
    const ByteTrie::Node& n = trie.nodes[static_cast<std::size_t>(at)];
    if (n.value >= 0) found.emplace_back(n.value, text);
    for (const auto& [byte, child] : n.children) todo.emplace_back(child, text + static_cast<char>(byte));
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [value, text] : found) out.push_back(std::move(text));
  return out;
}

// The literal texts `node` admits, in order, where it admits only literals (a literal, a literal set, or a
// choice of them, references followed); false otherwise.
bool literal_texts(const Grammar& g, int32_t node, std::vector<std::string>& out, int depth = 0) {
  const Node& n = g.at(node);
  if (depth > 64) return false;
  switch (n.kind) {
    case NodeKind::kLiteral: out.push_back(n.literal); return true;
    case NodeKind::kLiteralSet:
      for (std::string& t : trie_strings(n.trie)) out.push_back(std::move(t));
      return true;
    case NodeKind::kChoice:
      for (int32_t c : n.children) {
        if (!literal_texts(g, c, out, depth + 1)) return false;
      }
      return !n.children.empty();
    default: return false;
  }
}

}  // namespace

int32_t SchemaCompiler::compile_unique(int32_t item, int64_t min, int64_t max, bool max_given,
                                       const std::string& path) {
  std::vector<std::string> texts;
  constexpr std::size_t kMostValues = 256;
  const bool literals = literal_texts(g_, item, texts);
  ORBIT_CHECK(literals, path << ": 'uniqueItems' is not supported over these items: only where each item is one of "
                             << "a few listed values (an enum or const, booleans; written in the order listed, each "
                             << "at most once)");
  // Distinct values as JSON compares them (1 and 1.0 are one value), the first spelling kept.
  std::vector<std::string> values;
  std::vector<nlohmann::json> seen;  // unordered objects: {"a": 1, "b": 2} is {"b": 2, "a": 1}
  for (const std::string& t : texts) {
    const nlohmann::json v = nlohmann::json::parse(t);
    if (std::find(seen.begin(), seen.end(), v) != seen.end()) continue;
    seen.push_back(v);
    values.push_back(t);
  }
  ORBIT_CHECK(values.size() <= kMostValues, path << ": 'uniqueItems' over " << values.size() << " values is not "
                                                 << "supported (at most " << kMostValues << ")");
  const auto count = static_cast<int64_t>(values.size());
  ORBIT_CHECK(min <= count, path << ": minItems " << min << " is above the " << count
                                 << " distinct values the items admit (uniqueItems)");
  return add_ordered_subset(values, min, max_given ? std::min(max, count) : count);
}

// Built from the end: rest(j, c), after c values with the next one at index j or later, is "end" (from min on)
// or take(j, c); take(j, c) is "',' value j, then rest(j + 1, c + 1)" or take(j + 1, c) (value j skipped).
int32_t SchemaCompiler::add_ordered_subset(const std::vector<std::string>& values, int64_t min, int64_t max) {
  const bool space = limits_.whitespace == Whitespace::kSingleSpace;
  const auto k = static_cast<int64_t>(values.size());
  ORBIT_CHECK(g_.nodes.size() + static_cast<std::size_t>((k + 1) * (max + 1) * 4) < kMaxNodes,
              "the schema is too large (over " << kMaxNodes << " nodes)");
  const int32_t close = add_literal(g_, "]");
  // one optional ' ' after '[' and each ',', as arrays have
  const int32_t gap = space ? add_either(g_, add_literal_set(g_, {" "}), add_literal(g_, "")) : -1;
  int32_t comma = add_literal(g_, ",");
  if (space) {
    Node sep;
    sep.kind = NodeKind::kSequence;
    sep.children = {comma, gap};
    comma = g_.add(std::move(sep));
  }
  std::vector<int32_t> literal;
  for (const std::string& v : values) literal.push_back(add_literal(g_, v));
  // rest[c][j] for c in [0, max], j in [0, k]; filled for c from max down, j from k down.
  std::vector<std::vector<int32_t>> rest(static_cast<std::size_t>(max + 1), std::vector<int32_t>(k + 1, -1));
  for (int64_t c = max; c >= 0; --c) {
    int32_t take = -1;  // take(j, c), for the j of the loop below
    for (int64_t j = k; j >= 0; --j) {
      const int32_t after =
          j < k && c < max ? rest[static_cast<std::size_t>(c + 1)][static_cast<std::size_t>(j + 1)] : -1;
      if (after >= 0) {
        Node pick;
        pick.kind = NodeKind::kSequence;
        if (c > 0) pick.children.push_back(comma);
        pick.children.push_back(literal[static_cast<std::size_t>(j)]);
        pick.children.push_back(after);
        const int32_t here = g_.add(std::move(pick));
        take = take < 0 ? here : add_either(g_, here, take);
      }
      Node r;
      r.kind = NodeKind::kChoice;
      if (c >= min) r.children.push_back(close);
      if (take >= 0) r.children.push_back(take);
      rest[static_cast<std::size_t>(c)][static_cast<std::size_t>(j)] = r.children.empty() ? -1 : g_.add(std::move(r));
    }
  }
  Node whole;
  whole.kind = NodeKind::kSequence;
  whole.children.push_back(add_literal(g_, "["));
  if (space) whole.children.push_back(gap);
  whole.children.push_back(rest[0][0]);
  return g_.add(std::move(whole));
}

}  // namespace orbit::constrain::schema

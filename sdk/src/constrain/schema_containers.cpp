// Arrays and tuples (prefixItems, or draft-07's list of items) compiled into grammar nodes
// (schema_compiler.h); objects and maps are schema_objects.cpp's.
#include <algorithm>

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

// '[' node[0] ',' node[1] ... ']' of min to max items, node i at position i (the last node repeated past the
// list). Built from the end: each position's rest is "',' item, then the next rest", a choice with "" from min on.
int32_t SchemaCompiler::add_tuple(const std::vector<int32_t>& nodes, int64_t min, int64_t max) {
  const bool space = limits_.whitespace == Whitespace::kSingleSpace;
  const int32_t gap = space ? add_literal_set(g_, {" "}) : -1;
  const int32_t none = add_literal(g_, "");
  const auto mark = [&](std::vector<int32_t>& seq, const std::string& text) {
    seq.push_back(add_literal(g_, text));
    if (!space) return;
    Node optional;
    optional.kind = NodeKind::kChoice;
    optional.children = {gap, none};
    seq.push_back(g_.add(std::move(optional)));
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
    if (i < min) continue;
    Node optional;
    optional.kind = NodeKind::kChoice;
    optional.children = {rest, none};
    rest = g_.add(std::move(optional));
  }
  Node whole;
  whole.kind = NodeKind::kSequence;
  mark(whole.children, "[");
  whole.children.push_back(rest);
  whole.children.push_back(add_literal(g_, "]"));
  return g_.add(std::move(whole));
}

}  // namespace orbit::constrain::schema

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

// A tuple of exactly its listed items, as a sequence: '[', each item with ',' between, ']' (one optional
// space after '[' and each ',' as arrays have). A tuple that may be shorter or longer is refused.
int32_t SchemaCompiler::compile_tuple(const Json& s, const Json& items, const std::string& key,
                                      const std::string& path) {
  ORBIT_CHECK(items.is_array(), path << "." << key << ": expected a list of schemas, not " << brief(items));
  const auto n = static_cast<int64_t>(items.size());
  const std::string closed = key == "items" ? "additionalItems" : "items";
  const bool is_closed = (s.contains(closed) && s.at(closed) == Json(false)) ||
                         (s.contains("maxItems") && count_of(s, "maxItems", path) == n);
  const bool is_full = (s.contains("minItems") ? count_of(s, "minItems", path) : 0) == n;
  ORBIT_CHECK(is_closed && is_full, path << "." << key << ": only a tuple of exactly its " << n << " items is "
                                         << "supported (minItems and maxItems " << n << ", or " << closed
                                         << " false with minItems " << n << ")");
  for (const auto& [k, v] : s.items()) {
    ORBIT_CHECK(k == key || k == closed || k == "minItems" || k == "maxItems" || k == "type" || annotations().count(k),
                path << ": '" << k << "' beside '" << key << "' is not supported");
  }
  Node seq;
  seq.kind = NodeKind::kSequence;
  const bool space = limits_.whitespace == Whitespace::kSingleSpace;
  const int32_t gap = space ? add_literal_set(g_, {" "}) : -1;
  const auto separator = [&](const std::string& mark) {
    seq.children.push_back(add_literal(g_, mark));
    if (!space) return;
    Node optional;
    optional.kind = NodeKind::kChoice;
    optional.children = {gap, add_literal(g_, "")};
    seq.children.push_back(g_.add(std::move(optional)));
  };
  separator("[");
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) separator(",");
    seq.children.push_back(
        compile_member(items[static_cast<std::size_t>(i)], path + "." + key + "[" + std::to_string(i) + "]"));
  }
  seq.children.push_back(add_literal(g_, "]"));
  return g_.add(std::move(seq));
}

}  // namespace orbit::constrain::schema

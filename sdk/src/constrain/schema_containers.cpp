// Objects (declared properties, or a map under additionalProperties), arrays and tuples (prefixItems, or
// draft-07's list of items) compiled into grammar nodes (schema_compiler.h).
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

// A map: keys under propertyNames (any strings without it), each value under `value_schema`.
int32_t SchemaCompiler::compile_map(const Json& s, const Json& value_schema, const std::string& path) {
  Node n;
  n.kind = NodeKind::kAnyObject;
  n.space = limits_.whitespace == Whitespace::kSingleSpace;
  n.max_count = limits_.max_object_members;
  const int32_t key = s.contains("propertyNames") ? compile_key(s.at("propertyNames"), path + ".propertyNames")
                                                  : add_string(g_, 0, limits_.max_string_chars);
  n.children = {key, compile_member(value_schema, path + ".additionalProperties")};
  return g_.add(std::move(n));
}

// A map's keys: a schema of strings (string keywords, or an enum or const of strings).
int32_t SchemaCompiler::compile_key(const Json& names, const std::string& path) {
  if (names == Json(true)) return add_string(g_, 0, limits_.max_string_chars);
  ORBIT_CHECK(names.is_object(), path << ": expected a schema of strings, not " << brief(names));
  for (const auto& [k, v] : names.items()) {
    const bool string_keyword = k == "type" || k == "pattern" || k == "format" || k == "minLength" ||
                                k == "maxLength" || k == "enum" || k == "const";
    ORBIT_CHECK(string_keyword || annotations().count(k), path << ": '" << k << "' is not supported for keys");
  }
  ORBIT_CHECK(!names.contains("type") || names.at("type") == Json("string"),
              path << ".type: keys are strings, not " << brief(names.at("type")));
  for (const char* list : {"enum", "const"}) {
    if (!names.contains(list)) continue;
    const Json& v = names.at(list);
    const bool strings =
        v.is_array() ? std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_string(); }) : v.is_string();
    ORBIT_CHECK(strings, path << "." << list << ": keys are strings");
  }
  Json typed = names;
  typed["type"] = "string";
  return compile(typed, path);
}

int32_t SchemaCompiler::compile_object(const Json& s, const std::string& path) {
  const bool declared = s.contains("properties") || s.contains("required");
  if (s.contains("additionalProperties")) {
    const Json& ap = s.at("additionalProperties");
    const bool open = ap.is_object() || ap == Json(true);
    ORBIT_CHECK(open || ap == Json(false),
                path << ".additionalProperties: expected a schema or a boolean, not " << brief(ap));
    ORBIT_CHECK(!(open && declared), path << ".additionalProperties: beside properties only false is supported ("
                                          << brief(ap) << " given; the output has exactly the listed properties)");
    if (open) return compile_map(s, ap, path);
  }
  ORBIT_CHECK(!s.contains("propertyNames"),
              path << ".propertyNames: supported only for a map (additionalProperties a schema, no properties)");
  if (!declared && !s.contains("additionalProperties")) return add_any_object(g_, limits_);
  std::vector<std::string> names;
  std::vector<int32_t> values;
  if (s.contains("properties")) {
    const Json& props = s.at("properties");
    ORBIT_CHECK(props.is_object(), path << ".properties: expected an object, not " << brief(props));
    for (const auto& [name, sub] : props.items()) {
      names.push_back(name);
      values.push_back(compile_member(sub, path + ".properties." + name));
    }
  }
  std::vector<bool> required(names.size(), false);
  if (s.contains("required")) {
    const Json& req = s.at("required");
    ORBIT_CHECK(req.is_array(), path << ".required: expected a list of property names, not " << brief(req));
    for (const Json& r : req) {
      ORBIT_CHECK(r.is_string(), path << ".required: " << brief(r) << " is not a property name");
      const auto it = std::find(names.begin(), names.end(), r.get<std::string>());
      ORBIT_CHECK(it != names.end(), path << ".required: '" << r.get<std::string>()
                                          << "' is not in properties (no other property may appear)");
      required[static_cast<std::size_t>(it - names.begin())] = true;
    }
  }
  std::vector<std::string> keys;
  Node n;
  n.kind = NodeKind::kObject;
  n.space = limits_.whitespace == Whitespace::kSingleSpace;
  for (const std::string& name : names) {
    keys.push_back(json_quote(name));
    n.key_bytes.push_back(static_cast<int64_t>(keys.back().size()));
  }
  n.trie = ByteTrie::of(keys);
  n.required = required;
  n.children = values;
  return g_.add(std::move(n));
}

}  // namespace orbit::constrain::schema

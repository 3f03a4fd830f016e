// Objects compiled into grammar nodes (schema_compiler.h): declared properties in their order (kObject) and,
// beside additionalProperties true or a schema, extra members after them; maps (additionalProperties without
// properties: kAnyObject); minProperties and maxProperties on each.
//
// An extra member's key is none of the declared names, compared as decoded text: extra keys are written in
// the one spelling json_quote() gives a text (canonical_string_dfa), so leaving out the declared names'
// quoted bytes leaves out every spelling of them ("\u0061" for a declared "a" is not written). propertyNames
// holds for extra keys (their automaton is its language without the declared names) and must hold for every
// declared name, or the schema is refused. A map's keys under a pattern or format are written in that one
// spelling too. Keys are not compared with one another here (no grammar can keep an unbounded set of keys
// apart): the decoder refuses a repeated key (key_log.h). What the grammar does is keep an object to the
// number of distinct keys it can have, where that is finite (an enum of names, a short pattern), so that a
// member it allows always has a key left to write.
#include <algorithm>
#include <unordered_set>

#include "constrain/schema_compiler.h"
#include "orbit/common/error.h"

namespace orbit::constrain::schema {

namespace {

// Counters of an object that counts its members stay below 2^31 (matcher.cpp: key).
constexpr int64_t kMaxObjectCounter = (int64_t{1} << 31) - 1;
// Table entries objects under minProperties may add in one schema (16 bytes each).
constexpr int64_t kMaxObjectTables = int64_t{1} << 20;
// Table entries under which an open object keeps one column per member owed (below).
constexpr int64_t kExactObjectTables = int64_t{1} << 12;

MemberCounts member_counts(const Json& s, const std::string& path) {
  MemberCounts c;
  if (s.contains("minProperties")) c.min = count_of(s, "minProperties", path);
  if (s.contains("maxProperties")) c.max = count_of(s, "maxProperties", path);
  ORBIT_CHECK(!c.max || c.min <= *c.max, path << ".minProperties: " << c.min << " is above maxProperties " << *c.max);
  return c;
}

// How many distinct keys the key node `key` writes (each text in one spelling), counted up to `cap`.
int64_t keys_within(const Grammar& g, int32_t key, int64_t cap) {
  cap = std::min(cap, kMaxObjectCounter);
  const Node& n = g.at(key);
  switch (n.kind) {
    case NodeKind::kLiteralSet:
      return std::count_if(n.trie.nodes.begin(), n.trie.nodes.end(),
                           [](const ByteTrie::Node& t) { return t.value >= 0; });
    case NodeKind::kDfa: return count_texts(*n.dfa, n.max_count, cap);
    case NodeKind::kString: return n.max_count == 0 ? 1 : cap;  // "", or more texts than any cap
    default: return cap;
  }
}

int64_t code_points(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<uint8_t>(c) & 0xC0) != 0x80; });
}

// Refuses a declared name that propertyNames does not admit.
void check_names(const KeyRules& keys, const std::vector<std::string>& names, const std::string& path) {
  std::optional<ByteDfa> all;
  if (!keys.names) all = canonical_string_dfa(keys.strings, path);
  for (const std::string& name : names) {
    const bool ok = keys.names ? std::find(keys.names->begin(), keys.names->end(), name) != keys.names->end()
                               : accepts(*all, json_quote(name)) && code_points(name) <= keys.strings.max_chars;
    ORBIT_CHECK(ok, path << ": the property name " << json_quote(name) << " does not hold under it");
  }
}

}  // namespace

KeyRules SchemaCompiler::key_rules(const Json& names, const std::string& path) const {
  KeyRules k;
  k.strings.max_chars = limits_.max_string_chars;
  if (names == Json(true)) return k;
  ORBIT_CHECK(names.is_object(), path << ": expected a schema of strings, not " << brief(names));
  for (const auto& [key, v] : names.items()) {
    const bool string_keyword = key == "type" || key == "pattern" || key == "format" || key == "minLength" ||
                                key == "maxLength" || key == "enum" || key == "const";
    ORBIT_CHECK(string_keyword || is_annotation(key), path << ": '" << key << "' is not supported for keys");
  }
  ORBIT_CHECK(!names.contains("type") || names.at("type") == Json("string"),
              path << ".type: keys are strings, not " << brief(names.at("type")));
  for (const char* list : {"enum", "const"}) {
    if (!names.contains(list)) continue;
    only_beside(names, list, {"type"}, path);
    const bool is_enum = std::string(list) == "enum";
    const Json values = is_enum ? names.at(list) : Json::array({names.at(list)});
    ORBIT_CHECK(values.is_array() && !values.empty(),
                path << ".enum: expected a non-empty list of names, not " << brief(values));
    const bool strings = std::all_of(values.begin(), values.end(), [](const Json& x) { return x.is_string(); });
    ORBIT_CHECK(strings, path << "." << list << ": keys are strings");
    k.names.emplace();
    for (const Json& x : values) k.names->push_back(x.get<std::string>());
    return k;
  }
  const int64_t min = names.contains("minLength") ? count_of(names, "minLength", path) : 0;
  k.strings.min_chars = min;
  k.strings.max_chars =
      names.contains("maxLength") ? count_of(names, "maxLength", path) : std::max(min, limits_.max_string_chars);
  ORBIT_CHECK(min <= k.strings.max_chars,
              path << ": minLength " << min << " is above maxLength " << k.strings.max_chars);
  for (const char* key : {"pattern", "format"}) {
    if (!names.contains(key)) continue;
    ORBIT_CHECK(names.at(key).is_string(), path << "." << key << ": expected a string, not " << brief(names.at(key)));
    (std::string(key) == "pattern" ? k.strings.pattern : k.strings.format) =
        names.at(key).get_ptr<const std::string*>();
  }
  cap_format_chars(k.strings, path);
  return k;
}

int32_t SchemaCompiler::add_key(const KeyRules& keys, const std::string& path) {
  if (keys.names) {
    std::vector<std::string> quoted;
    std::unordered_set<std::string> seen;  // each name once, found in linear time
    for (const std::string& name : *keys.names) {
      if (seen.insert(json_quote(name)).second) quoted.push_back(json_quote(name));
    }
    return add_literal_set(g_, quoted);
  }
  const StringRules& r = keys.strings;
  if (r.pattern == nullptr && r.format == nullptr) return add_string(g_, r.min_chars, r.max_chars);
  check_dfa_room(g_, path);
  return add_dfa(g_, canonical_string_dfa(r, path), r.max_chars, path);
}

int32_t SchemaCompiler::add_extra_key(const KeyRules& keys, const std::vector<std::string>& names,
                                      const std::string& path) {
  std::vector<std::string> declared;
  for (const std::string& name : names) declared.push_back(json_quote(name));
  if (keys.names) {
    // The names not declared, each once: `taken` (declared ones, then those kept) keeps it linear.
    std::unordered_set<std::string> taken(declared.begin(), declared.end());
    std::vector<std::string> left;
    for (const std::string& name : *keys.names) {
      std::string q = json_quote(name);
      if (taken.insert(q).second) left.push_back(std::move(q));
    }
    return left.empty() ? -1 : add_literal_set(g_, left);
  }
  check_dfa_room(g_, path);
  std::optional<ByteDfa> extra = without(canonical_string_dfa(keys.strings, path), declared, path);
  if (!extra || extra->min_chars[0] > keys.strings.max_chars) return -1;
  return add_dfa(g_, std::move(*extra), keys.strings.max_chars, path);
}

// A map: keys under propertyNames (any strings without it), each value under `value_schema`.
int32_t SchemaCompiler::compile_map(const Json& s, const Json& value_schema, const MemberCounts& counts,
                                    const std::string& path) {
  Node n;
  n.kind = NodeKind::kAnyObject;
  n.space = limits_.whitespace == Whitespace::kSingleSpace;
  n.min_count = counts.min;
  n.max_count = counts.max ? *counts.max : std::max(counts.min, limits_.max_object_members);
  int32_t key = -1;
  if (s.contains("propertyNames")) {
    key = add_key(key_rules(s.at("propertyNames"), path + ".propertyNames"), path + ".propertyNames");
  } else {
    key = add_string(g_, 0, limits_.max_string_chars);
  }
  // No more members than distinct keys (a repeated key is refused).
  const int64_t most = keys_within(g_, key, std::max(counts.min, n.max_count) + 1);
  ORBIT_CHECK(counts.min <= most,
              path << ".minProperties: " << counts.min << " is above the " << most << " names propertyNames admits");
  n.max_count = std::min(n.max_count, most);
  n.children = {key, compile_member(value_schema, path + ".additionalProperties")};
  return g_.add(std::move(n));
}

int32_t SchemaCompiler::compile_object(const Json& s, const std::string& path) {
  const Json* extra = nullptr;  // additionalProperties that admits members: true or a schema
  bool closed = false;          // additionalProperties false
  if (s.contains("additionalProperties")) {
    const Json& ap = s.at("additionalProperties");
    ORBIT_CHECK(ap.is_object() || ap.is_boolean(),
                path << ".additionalProperties: expected a schema or a boolean, not " << brief(ap));
    closed = ap == Json(false);
    if (!closed) extra = &ap;
  }
  const MemberCounts counts = member_counts(s, path);
  if (s.contains("properties") || s.contains("required") || closed) return compile_fields(s, extra, counts, path);
  const bool plain = !s.contains("propertyNames") && !s.contains("minProperties") && !s.contains("maxProperties");
  if (extra == nullptr && plain) return add_any_object(g_, limits_);
  static const Json kAny(true);
  return compile_map(s, extra != nullptr ? *extra : kAny, counts, path);
}

// The declared properties: properties in their order, then a required name that properties lacks when
// `extra_value` (additionalProperties' value node) is given, its value under it.
Fields SchemaCompiler::compile_declared(const Json& s, int32_t extra_value, const std::string& path) {
  Fields f;
  if (s.contains("properties")) {
    const Json& props = s.at("properties");
    ORBIT_CHECK(props.is_object(), path << ".properties: expected an object, not " << brief(props));
    for (const auto& [name, sub] : props.items()) {
      f.names.push_back(name);
      f.values.push_back(compile_member(sub, path + ".properties." + name));
    }
  }
  f.required.assign(f.names.size(), false);
  if (!s.contains("required")) return f;
  const Json& req = s.at("required");
  ORBIT_CHECK(req.is_array(), path << ".required: expected a list of property names, not " << brief(req));
  for (const Json& r : req) {
    ORBIT_CHECK(r.is_string(), path << ".required: " << brief(r) << " is not a property name");
    const std::string& name = r.get_ref<const std::string&>();
    auto it = std::find(f.names.begin(), f.names.end(), name);
    if (it == f.names.end()) {
      ORBIT_CHECK(extra_value >= 0,
                  path << ".required: '" << name << "' is not in properties (no other property may appear)");
      f.names.push_back(name);
      f.values.push_back(extra_value);
      f.required.push_back(false);
      it = f.names.end() - 1;
    }
    f.required[static_cast<std::size_t>(it - f.names.begin())] = true;
  }
  return f;
}

// Declared properties in their order, and beside `extra` (additionalProperties true or a schema) extra
// members after them.
int32_t SchemaCompiler::compile_fields(const Json& s, const Json* extra, const MemberCounts& counts,
                                       const std::string& path) {
  const int32_t extra_value = extra != nullptr ? compile_member(*extra, path + ".additionalProperties") : -1;
  const Fields f = compile_declared(s, extra_value, path);
  static const Json kAny(true);
  const bool has_names = s.contains("propertyNames");
  const std::string names_path = path + (has_names ? ".propertyNames" : ".additionalProperties");
  const KeyRules keys = key_rules(has_names ? s.at("propertyNames") : kAny, path + ".propertyNames");
  if (has_names) check_names(keys, f.names, names_path);
  const int32_t extra_key = extra != nullptr ? add_extra_key(keys, f.names, names_path) : -1;

  const auto count = static_cast<int64_t>(f.names.size());
  const auto required_count = static_cast<int64_t>(std::count(f.required.begin(), f.required.end(), true));
  const bool open = extra_key >= 0;
  ORBIT_CHECK(open || counts.min <= count, path << ".minProperties: " << counts.min << " is above the " << count
                                                << " properties the object may have");
  ORBIT_CHECK(!counts.max || *counts.max >= required_count, path << ".maxProperties: " << *counts.max
                                                                 << " is below the " << required_count
                                                                 << " required properties");
  Node n;
  n.kind = NodeKind::kObject;
  n.space = limits_.whitespace == Whitespace::kSingleSpace;
  n.open = open;
  n.min_count = counts.min;
  n.max_count = counts.max ? *counts.max : open ? std::max({limits_.max_object_members, counts.min, count}) : count;
  if (!open) n.max_count = std::min(n.max_count, count);
  if (open) {  // no more members than distinct keys (a repeated key is refused)
    const int64_t keys = keys_within(g_, extra_key, std::max(counts.min, n.max_count) + 1);
    if (keys <= std::max(counts.min, n.max_count)) n.extra_keys = keys;
    const int64_t most = count + keys;
    ORBIT_CHECK(counts.min <= most, path << ".minProperties: " << counts.min << " is above the " << most
                                         << " properties the object may have (propertyNames admits no more)");
    n.max_count = std::min(n.max_count, most);
  }
  n.counted = open || counts.min > 0 || n.max_count < count;
  if (n.counted) {  // the frame's counter (matcher_nodes.h) must fit
    n.max_count = std::min(n.max_count, kMaxObjectCounter / (count + 1) - 1);
    ORBIT_CHECK(counts.min <= n.max_count && required_count <= n.max_count,
                path << ": too many properties (" << count << ") to count the members of");
  }
  // Past the declared count (at least 1, where after_comma's entries stop differing from rest's by the '}'),
  // each member owed costs at least one more extra member (grammar.h: object_table). Extra members have
  // distinct keys, each dearer than the one before, so an open object whose tables stay small keeps a column
  // per member owed and its fewest bytes are exact; a larger one's are a lower bound past the declared count.
  n.need_cap = std::min(counts.min, std::max<int64_t>(count, 1));
  if (open && (count + 1) * (counts.min + 1) <= kExactObjectTables) n.need_cap = counts.min;
  object_tables_ += (count + 1) * n.need_cap;
  ORBIT_CHECK(object_tables_ <= kMaxObjectTables, path << ".minProperties: " << counts.min << " beside " << count
                                                       << " properties is too large to constrain");
  std::vector<std::string> quoted;
  for (const std::string& name : f.names) {
    quoted.push_back(json_quote(name));
    n.key_bytes.push_back(static_cast<int64_t>(quoted.back().size()));
  }
  n.trie = ByteTrie::of(quoted);
  n.required = f.required;
  n.children = f.values;
  if (open) n.children.insert(n.children.end(), {extra_key, extra_value});
  return g_.add(std::move(n));
}

}  // namespace orbit::constrain::schema

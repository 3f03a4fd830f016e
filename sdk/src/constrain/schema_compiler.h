// The JSON Schema compiler's parts (schema.cpp: keywords and dispatch; schema_containers.cpp: arrays and
// tuples; schema_objects.cpp: objects and maps; schema_unions.cpp: oneOf; schema_merge.cpp: schemas combined). Private
// to orbit_constrain.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "constrain/grammar.h"
#include "constrain/schema_regular.h"

namespace orbit::constrain::schema {

using Json = nlohmann::ordered_json;  // keeps properties in the order the schema declares them

// Keywords that describe a schema without constraining its values: accepted and ignored.
const std::set<std::string>& annotations();
// One of annotations(), or an OpenAPI specification extension ("x-" and any name: x-order, x-nullable, ...),
// which by OpenAPI's definition says nothing of the value.
bool is_annotation(const std::string& key);
// A value in a few words, for errors.
std::string brief(const Json& v);
// Refuses keywords other than annotations and `allowed` beside `what`.
void only_beside(const Json& s, const std::string& what, const std::set<std::string>& allowed, const std::string& path);
// The types "type" names, or those the keywords apply to when it is absent (properties: object, minLength:
// string, ...); none: any value.
std::vector<std::string> schema_types(const Json& s, const std::string& path);
// Whether `s` has keywords that constrain values beside `key` (annotations and discriminator aside).
bool has_siblings(const Json& s, const std::string& key);
// s[key] as a count (a non-negative integer), or a refusal naming it.
int64_t count_of(const Json& s, const char* key, const std::string& path);

// minProperties and maxProperties as a schema gives them.
struct MemberCounts {
  int64_t min = 0;
  std::optional<int64_t> max;
};

// propertyNames: a list of names (enum or const), or string keywords (pointers into the schema).
struct KeyRules {
  std::optional<std::vector<std::string>> names;
  StringRules strings;
};

// An object's declared properties: names, value nodes and whether each is required.
struct Fields {
  std::vector<std::string> names;
  std::vector<int32_t> values;
  std::vector<bool> required;
};

class SchemaCompiler {
 public:
  SchemaCompiler(Grammar& g, const ConstraintLimits& limits, const Json& root, std::string root_path)
      : g_(g), limits_(limits), root_(root), root_path_(std::move(root_path)) {}

  int32_t compile(const Json& s, const std::string& path);

 private:
  static constexpr std::size_t kMaxNodes = 100000;
  // Schemas compiled within one another at most: members, items and $ref targets (a chain of references nests
  // no deeper in the JSON text, and each level is a few frames of this recursion and of the grammar's walks).
  static constexpr int kMaxDepth = 128;

  int32_t compile_type(const Json& s, const std::string& type, const std::string& path);
  int32_t compile_nullable(const Json& s, const std::string& path);
  int32_t compile_string(const Json& s, const std::string& path);
  int32_t compile_number(const Json& s, bool integer, const std::string& path);
  int32_t compile_enum(const Json& s, const std::vector<std::string>& types, const std::string& path);
  int32_t compile_any_of(const Json& s, const std::string& path);
  int32_t compile_all_of(const Json& s, const std::string& path);
  int32_t compile_ref(const Json& s, const std::string& path);
  // schema_unions.cpp
  int32_t compile_one_of(const Json& s, const std::string& path);
  const Json& resolve(const Json& s, const std::string& path) const;            // through $ref
  bool exclusive(const Json& a, const Json& b, const std::string& path) const;  // no value matches both
  // schema_merge.cpp: allOf of several schemas and keywords beside $ref, anyOf, allOf or oneOf, combined
  int32_t compile_with_siblings(const Json& s, const std::string& key, const std::string& path);
  std::optional<Json> merge_schemas(const Json& a, const Json& b, const std::string& where);
  std::optional<Json> merge_keyword(const std::string& k, const Json& x, const Json& y, const std::string& where);
  Json both(const Json& x, const Json& y, const std::string& where);
  const Json& target_of(const Json& ref, const std::string& where) const;
  // schema_containers.cpp
  int32_t compile_member(const Json& s, const std::string& path);  // a member or item: inside a container
  int32_t compile_array(const Json& s, const std::string& path);
  int32_t compile_tuple(const Json& s, const Json& items, const std::string& key, const std::string& path);
  int32_t add_tuple(const std::vector<int32_t>& nodes, int64_t min, int64_t max);
  // uniqueItems over items whose values are a few literals (an enum, a const, booleans): each value at most once,
  // in the order the item schema lists them. Refused, naming it, for other items.
  int32_t compile_unique(int32_t item, int64_t min, int64_t max, bool max_given, const std::string& path);
  // '[' then, from the listed `values` in order, each taken or skipped, `min` to `max` taken, ',' between, ']'.
  int32_t add_ordered_subset(const std::vector<std::string>& values, int64_t min, int64_t max);
  // schema_objects.cpp
  int32_t compile_object(const Json& s, const std::string& path);
  // Declared properties (and, where `extra` is a schema or true, extra members under it).
  int32_t compile_fields(const Json& s, const Json* extra, const MemberCounts& counts, const std::string& path);
  Fields compile_declared(const Json& s, int32_t extra_value, const std::string& path);
  int32_t compile_map(const Json& s, const Json& value_schema, const MemberCounts& counts, const std::string& path);
  KeyRules key_rules(const Json& names, const std::string& path) const;
  int32_t add_key(const KeyRules& keys, const std::string& path);  // a map's keys
  // An open object's extra keys: those `keys` admit but `names`; -1 when none is left.
  int32_t add_extra_key(const KeyRules& keys, const std::vector<std::string>& names, const std::string& path);

  Grammar& g_;
  const ConstraintLimits& limits_;
  const Json& root_;
  std::string root_path_;
  // References being compiled: their placeholder node and the containers open when they began.
  std::map<std::string, std::pair<int32_t, int>> expanding_;
  std::set<int32_t> used_placeholders_;  // placeholders a recursive reference points at
  int containers_ = 0;                   // objects and arrays whose members are being compiled
  std::map<std::string, int32_t> compiled_refs_;
  int merges_ = 0;             // references being combined (merge_schemas), nested
  int combining_ = 0;          // compile_with_siblings calls in progress, nested
  int depth_ = 0;              // compile calls in progress, nested
  int64_t object_tables_ = 0;  // entries the objects under minProperties add to their tables (grammar.h)
};

}  // namespace orbit::constrain::schema

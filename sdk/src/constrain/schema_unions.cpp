// oneOf (schema_compiler.h): exactly one of its schemas must hold. A grammar follows alternatives as a
// choice, which is anyOf; so oneOf is compiled only when no value can match two of its schemas, which this
// proves from the schemas' text: different types, different const/enum values, or (a tagged union, as
// Pydantic's discriminated unions and zod's discriminatedUnion write) a property every alternative requires
// with different const/enum values, or a property one requires and the other forbids (additionalProperties false
// without it, as zod's xor of strict objects writes). Anything else is refused, naming the pair.
#include <algorithm>
#include <set>

#include "constrain/schema_compiler.h"
#include "orbit/common/error.h"

namespace orbit::constrain::schema {

namespace {

// The types a schema admits, or nullopt when that is not known from its text (any value, anyOf, ...).
std::optional<std::set<std::string>> types_admitted(const Json& s) {
  if (!s.is_object()) return std::nullopt;
  std::set<std::string> out;
  if (s.contains("type")) {
    const Json& t = s.at("type");
    for (const Json& n : t.is_array() ? t : Json::array({t})) {
      if (n.is_string()) out.insert(n.get<std::string>());
    }
  } else if (s.contains("const") || s.contains("enum")) {
    const Json values = s.contains("const") ? Json::array({s.at("const")}) : s.at("enum");
    for (const Json& v : values) {
      out.insert(v.is_object()    ? "object"
                 : v.is_array()   ? "array"
                 : v.is_string()  ? "string"
                 : v.is_boolean() ? "boolean"
                 : v.is_null()    ? "null"
                                  : "number");
    }
  } else if (s.contains("properties") || s.contains("required")) {
    out.insert("object");
  } else {
    return std::nullopt;
  }
  if (out.count("integer")) out.insert("number");  // integers are numbers
  if (out.count("number")) out.insert("integer");
  return out;
}

// The values a const or enum allows, as compact JSON texts; nullopt when it has neither.
std::optional<std::set<std::string>> values_of(const Json& s) {
  if (!s.is_object()) return std::nullopt;
  if (s.contains("const")) return std::set<std::string>{s.at("const").dump()};
  if (!s.contains("enum") || !s.at("enum").is_array()) return std::nullopt;
  std::set<std::string> out;
  for (const Json& v : s.at("enum")) out.insert(v.dump());
  return out;
}

bool disjoint(const std::set<std::string>& a, const std::set<std::string>& b) {
  return std::none_of(a.begin(), a.end(), [&](const std::string& x) { return b.count(x) != 0; });
}

bool requires(const Json& s, const std::string& name) {
  if (!s.contains("required") || !s.at("required").is_array()) return false;
  const Json& r = s.at("required");
  return std::find(r.begin(), r.end(), Json(name)) != r.end();
}

// Whether no value `s` admits has property `name`: additionalProperties false, no patternProperties, and `name`
// not among its properties.
bool forbids(const Json& s, const std::string& name) {
  if (!s.contains("additionalProperties") || s.at("additionalProperties") != Json(false)) return false;
  if (s.contains("patternProperties")) return false;
  return !s.contains("properties") || !s.at("properties").is_object() || !s.at("properties").contains(name);
}

// Whether `x` requires a property `y` forbids.
bool requires_what_other_forbids(const Json& x, const Json& y) {
  if (!x.contains("required") || !x.at("required").is_array()) return false;
  const Json& r = x.at("required");
  return std::any_of(r.begin(), r.end(),
                     [&](const Json& n) { return n.is_string() && forbids(y, n.get<std::string>()); });
}

}  // namespace

const Json& SchemaCompiler::resolve(const Json& s, const std::string& path) const {
  const Json* at = &s;
  for (int hops = 0; at->is_object() && at->contains("$ref"); ++hops) {
    ORBIT_CHECK(hops < 32, path << ": $ref chains too deep");
    const Json& ref = at->at("$ref");
    ORBIT_CHECK(ref.is_string() && ref.get<std::string>().rfind("#/", 0) == 0, path << ".$ref: expected \"#/...\"");
    try {
      at = &root_.at(Json::json_pointer(ref.get<std::string>().substr(1)));
    } catch (const nlohmann::json::exception&) {
      ORBIT_FAIL(path << ".$ref: \"" << ref.get<std::string>() << "\" names nothing in the schema");
    }
  }
  return *at;
}

bool SchemaCompiler::exclusive(const Json& a, const Json& b, const std::string& path) const {
  const Json& x = resolve(a, path);
  const Json& y = resolve(b, path);
  const auto tx = types_admitted(x);
  const auto ty = types_admitted(y);
  if (tx && ty && disjoint(*tx, *ty)) return true;
  const auto vx = values_of(x);
  const auto vy = values_of(y);
  if (vx && vy) return disjoint(*vx, *vy);
  // A tag tells objects apart only where both admit nothing but objects.
  const std::set<std::string> objects{"object"};
  if (!tx || !ty || *tx != objects || *ty != objects) return false;
  if (requires_what_other_forbids(x, y) || requires_what_other_forbids(y, x)) return true;
  if (!x.contains("properties") || !y.contains("properties")) return false;
  for (const auto& [name, px] : x.at("properties").items()) {
    if (!requires(x, name) || !requires(y, name) || !y.at("properties").contains(name)) continue;
    const auto kx = values_of(resolve(px, path));
    const auto ky = values_of(resolve(y.at("properties").at(name), path));
    if (kx && ky && disjoint(*kx, *ky)) return true;
  }
  return false;
}

int32_t SchemaCompiler::compile_one_of(const Json& s, const std::string& path) {
  only_beside(s, "oneOf", {"discriminator"}, path);
  const Json& list = s.at("oneOf");
  ORBIT_CHECK(list.is_array() && !list.empty(),
              path << ".oneOf: expected a non-empty list of schemas, not " << brief(list));
  // Every pair is checked below: bounded so that one request's schema cannot hold a thread for long.
  constexpr std::size_t kMostChecked = 1024;
  ORBIT_CHECK(list.size() <= kMostChecked,
              path << ".oneOf: " << list.size() << " schemas, over the " << kMostChecked
                   << " whose pairs are checked to match no value in common: use anyOf (or enum for values)");
  for (std::size_t i = 0; i < list.size(); ++i) {
    for (std::size_t j = i + 1; j < list.size(); ++j) {
      ORBIT_CHECK(exclusive(list[i], list[j], path),
                  path << ".oneOf: [" << i << "] and [" << j << "] may match the same value; oneOf is supported "
                       << "when no value matches two of its schemas (different types or const/enum values, a "
                       << "property both require with different const/enum values, or one one requires and the other "
                       << "forbids with additionalProperties false): use anyOf");
    }
  }
  Node choice;
  choice.kind = NodeKind::kChoice;
  for (std::size_t i = 0; i < list.size(); ++i) {
    choice.children.push_back(compile(list[i], path + ".oneOf[" + std::to_string(i) + "]"));
  }
  return g_.add(std::move(choice));
}

}  // namespace orbit::constrain::schema

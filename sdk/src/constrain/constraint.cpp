// Building constraints (orbit/constraint.h): JSON Schema, json_object, literals, sequences, choices and tool
// calls, each compiled into one Grammar; and matching whole texts against them.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "constrain/parts.h"
#include "constrain/schema_compiler.h"
#include "orbit/common/error.h"

namespace orbit {

using constrain::ConstraintParts;
using constrain::Grammar;
using constrain::Node;
using constrain::NodeKind;

namespace {

void check_limits(const ConstraintLimits& l) {
  ORBIT_CHECK(l.max_string_chars >= 1,
              "ConstraintLimits::max_string_chars = " << l.max_string_chars << " must be >= 1");
  ORBIT_CHECK(l.max_number_chars >= 1,
              "ConstraintLimits::max_number_chars = " << l.max_number_chars << " must be >= 1");
  ORBIT_CHECK(l.max_array_items >= 0, "ConstraintLimits::max_array_items = " << l.max_array_items << " must be >= 0");
  ORBIT_CHECK(l.max_object_members >= 0,
              "ConstraintLimits::max_object_members = " << l.max_object_members << " must be >= 0");
  ORBIT_CHECK(l.max_depth >= 0 && l.max_depth <= 1000,
              "ConstraintLimits::max_depth = " << l.max_depth << " must be in [0, 1000]");
}

std::shared_ptr<const Constraint> make(Grammar g, std::string description) {
  g.description = std::move(description);
  ORBIT_CHECK(g.nodes.size() < constrain::kMaxNodes,
              "constraint: " << g.description << " has " << g.nodes.size() << " grammar nodes, more than the "
                             << constrain::kMaxNodes - 1 << " a matcher's frame can name");
  g.finish();
  // A part with no finite text: a recursive $ref whose every value must hold another, or lower bounds that
  // multiply past any length (the schema refuses each single minimum above 2^32 - 1 where it reads it).
  for (const Node& n : g.nodes) {
    ORBIT_CHECK(n.min_bytes < (int64_t{1} << 40),
                "constraint: " << g.description << " has a part no answer can finish: a recursive $ref whose every "
                               << "value holds another, or minimums (minLength, minItems, minProperties) whose "
                               << "shortest text is 2^40 bytes or more");
  }
  ORBIT_CHECK(g.at(g.root).min_bytes < (int64_t{1} << 40), "constraint: " << g.description << " admits no text");
  return constrain::Access::make(std::make_unique<ConstraintParts>(std::move(g)));
}

int32_t add_node(Grammar& g, NodeKind kind, std::vector<int32_t> children) {
  Node n;
  n.kind = kind;
  n.children = std::move(children);
  return g.add(std::move(n));
}

std::string join_descriptions(const char* what, const std::vector<std::shared_ptr<const Constraint>>& parts) {
  std::string out = std::string(what) + "(";
  for (std::size_t i = 0; i < parts.size(); ++i)
    out += (i ? ", " : "") + constrain::Access::parts(*parts[i]).grammar.description;
  return out + ")";
}

Grammar combine(const char* what, NodeKind kind, const std::vector<std::shared_ptr<const Constraint>>& parts) {
  ORBIT_CHECK(!parts.empty(), "Constraint::" << what << ": an empty list");
  Grammar g;
  std::vector<int32_t> roots;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    ORBIT_CHECK(parts[i] != nullptr, "Constraint::" << what << ": item " << i << " is null");
    roots.push_back(g.import(constrain::Access::parts(*parts[i]).grammar));
  }
  g.root = add_node(g, kind, std::move(roots));
  return g;
}

// Whether `text` leads the matcher from the start to a state that is a valid prefix (and, when `whole`, a
// whole match).
bool run(const ConstraintParts& p, std::string_view text, bool whole) {
  constrain::StateSet s, next;
  p.matcher.start(s);
  for (const char c : text) {
    if (!p.matcher.step(s, static_cast<uint8_t>(c), next)) return false;
    std::swap(s, next);
  }
  return !whole || p.matcher.can_end(s);
}

using Json = nlohmann::ordered_json;

// A schema that constrains nothing: true, or an object of annotations only.
bool says_nothing(const Json& schema) {
  if (schema == Json(true)) return true;
  if (!schema.is_object()) return false;
  return std::all_of(schema.items().begin(), schema.items().end(),
                     [](const auto& kv) { return constrain::schema::is_annotation(kv.key()); });
}

// One tool of an OpenAI tools array: its name and its parameters schema's text ("" when absent).
struct ToolSpec {
  std::string name;
  std::string parameters;
  std::string path;  // where the parameters sit, for errors
};

// A tool's parameters as a schema of objects only: a call's arguments are a JSON object (the reader takes no
// other), so a "type" that lists "object" among others (["object", "null"]: an optional model) is narrowed to it,
// one without a "type" gets it (what anyOf or $ref admit besides objects goes), and "nullable" is dropped.
// A "type" without "object" is refused, naming it: no call written under it could be read.
Json objects_only(const Json& parameters, const std::string& path) {
  if (!parameters.is_object()) return parameters;
  Json p = parameters;
  if (const auto type = p.find("type"); type != p.end()) {
    if (!type->is_string() && !(type->is_array() && !type->empty())) return p;  // the compiler refuses it, naming it
    const bool listed =
        type->is_string() ? *type == "object" : std::find(type->begin(), type->end(), "object") != type->end();
    ORBIT_CHECK(listed, path << ".type: " << type->dump() << " excludes \"object\": a tool's arguments are a JSON "
                             << "object");
  }
  p["type"] = "object";
  p.erase("nullable");
  return p;
}

std::vector<ToolSpec> read_tools(std::string_view tools_json) {
  Json tools;
  try {
    tools = Json::parse(tools_json.begin(), tools_json.end());
  } catch (const nlohmann::json::exception& e) {
    ORBIT_FAIL("tools: not valid JSON: " << e.what());
  }
  ORBIT_CHECK(tools.is_array() && !tools.empty(), "tools: expected a non-empty list of tools");
  std::vector<ToolSpec> out;
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const Json& tool = tools[i];
    ORBIT_CHECK(tool.is_object(), at << ": expected an object");
    const bool wrapped = tool.contains("function");
    const Json& fn = wrapped ? tool.at("function") : tool;
    const std::string fn_path = wrapped ? at + ".function" : at;
    ORBIT_CHECK(fn.is_object(), fn_path << ": expected an object");
    ORBIT_CHECK(fn.contains("name") && fn.at("name").is_string() && !fn.at("name").get<std::string>().empty(),
                fn_path << ".name: expected a non-empty string");
    ToolSpec spec;
    spec.name = fn.at("name").get<std::string>();
    for (const ToolSpec& other : out) {
      ORBIT_CHECK(other.name != spec.name, fn_path << ".name: '" << spec.name << "' names two tools");
    }
    // Parameters omitted (or null) are OpenAI's function with an empty parameter list: the arguments are {}.
    // Arguments are a JSON object: parameters that say nothing of them (true, {}, a description alone) are
    // any object, not any value.
    if (!fn.contains("parameters") || fn.at("parameters").is_null()) {
      spec.parameters = R"({"type": "object", "properties": {}})";
    } else if (!says_nothing(fn.at("parameters"))) {
      spec.parameters = objects_only(fn.at("parameters"), fn_path + ".parameters").dump();
    }
    spec.path = fn_path + ".parameters";
    out.push_back(std::move(spec));
  }
  return out;
}

}  // namespace

Constraint::Constraint(std::unique_ptr<constrain::ConstraintParts> parts) : parts_(std::move(parts)) {}
Constraint::~Constraint() = default;

std::shared_ptr<const Constraint> Constraint::json_schema(std::string_view schema_json, const ConstraintLimits& limits,
                                                          std::string_view path) {
  check_limits(limits);
  Grammar g;
  g.root = constrain::add_json_schema(g, schema_json, limits, std::string(path));
  return make(std::move(g), "json_schema");
}

std::shared_ptr<const Constraint> Constraint::json_object(const ConstraintLimits& limits) {
  check_limits(limits);
  Grammar g;
  g.root = constrain::add_any_object(g, limits);
  return make(std::move(g), "json_object");
}

std::shared_ptr<const Constraint> Constraint::json_value(const ConstraintLimits& limits) {
  check_limits(limits);
  Grammar g;
  g.root = constrain::add_any_value(g, limits);
  return make(std::move(g), "json_value");
}

std::shared_ptr<const Constraint> Constraint::literal(std::string_view text) {
  Grammar g;
  g.root = constrain::add_literal(g, std::string(text));
  return make(std::move(g), "literal");
}

std::shared_ptr<const Constraint> Constraint::sequence(const std::vector<std::shared_ptr<const Constraint>>& parts) {
  Grammar g = combine("sequence", NodeKind::kSequence, parts);
  return make(std::move(g), join_descriptions("sequence", parts));
}

std::shared_ptr<const Constraint> Constraint::choice(
    const std::vector<std::shared_ptr<const Constraint>>& alternatives) {
  Grammar g = combine("choice", NodeKind::kChoice, alternatives);
  return make(std::move(g), join_descriptions("choice", alternatives));
}

std::shared_ptr<const Constraint> Constraint::tool_calls(std::string_view tools_json, const ToolCallOptions& options) {
  check_limits(options.limits);
  ORBIT_CHECK(options.max_calls >= 1, "ToolCallOptions::max_calls = " << options.max_calls << " must be >= 1");
  std::vector<ToolSpec> tools = read_tools(tools_json);
  if (!options.only.empty()) {
    std::string names;
    for (const ToolSpec& t : tools) names += (names.empty() ? "" : ", ") + t.name;
    const auto it = std::find_if(tools.begin(), tools.end(), [&](const ToolSpec& t) { return t.name == options.only; });
    ORBIT_CHECK(it != tools.end(), "tool_choice: '" << options.only << "' is not among the tools (" << names << ")");
    tools = {*it};
  }
  const bool space = options.limits.whitespace == Whitespace::kSingleSpace;
  const std::string colon = space ? ": " : ":", comma = space ? ", " : ",";
  Grammar g;
  std::vector<int32_t> calls;
  for (const ToolSpec& t : tools) {
    const int32_t head = constrain::add_literal(g, options.begin + "{" + constrain::json_quote(options.name_key) +
                                                       colon + constrain::json_quote(t.name) + comma +
                                                       constrain::json_quote(options.arguments_key) + colon);
    const int32_t args = t.parameters.empty() ? constrain::add_any_object(g, options.limits)
                                              : constrain::add_json_schema(g, t.parameters, options.limits, t.path);
    const int32_t tail = constrain::add_literal(g, "}" + options.end);
    calls.push_back(add_node(g, NodeKind::kSequence, {head, args, tail}));
  }
  const int32_t one = calls.size() == 1 ? calls.front() : add_node(g, NodeKind::kChoice, calls);
  // Up to max_calls calls: one, then optionally (separator, one) again, nested.
  int32_t more = -1;
  for (int32_t k = 1; k < options.max_calls; ++k) {
    std::vector<int32_t> again{constrain::add_literal(g, options.separator), one};
    if (more >= 0) again.push_back(more);
    more = add_node(g, NodeKind::kChoice, {constrain::add_literal(g, ""), add_node(g, NodeKind::kSequence, again)});
  }
  g.root = more < 0 ? one : add_node(g, NodeKind::kSequence, {one, more});
  return make(std::move(g), "tool_calls(" + std::to_string(tools.size()) + " tools)");
}

bool Constraint::matches(std::string_view text) const { return run(*parts_, text, true); }
bool Constraint::is_prefix(std::string_view text) const { return run(*parts_, text, false); }
int64_t Constraint::min_bytes() const { return parts_->grammar.at(parts_->grammar.root).min_bytes; }

std::string Constraint::describe() const {
  return parts_->grammar.description + " (" + std::to_string(parts_->grammar.nodes.size()) + " nodes)";
}

}  // namespace orbit

// Whether a JSON value is shaped as a JSON Schema: each keyword orbit knows holds what the specification says it
// holds (a "type" names types that exist, "properties" maps names to schemas, "required" lists strings, "minLength"
// is a count, ...), in every subschema. A tool's parameters are checked so whatever tool_choice says, as OpenAI's
// API checks them: under tool_choice auto a schema outside the subset orbit/constraint.h enforces is taken and its
// calls left free, but one that is no schema at all ("type": "strin") is the client's mistake, refused at once.
// Keywords it does not know are left alone (annotations, extensions, later drafts).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace orbit::serve {

// The first problem found, "" where there is none: "properties.p.type: \"strin\" is not a JSON Schema type
// (...)" (the path from `schema`'s root, none for the root itself).
std::string schema_shape_problem(const nlohmann::ordered_json& schema);

}  // namespace orbit::serve

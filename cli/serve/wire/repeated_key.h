// The first key a JSON object gives twice. nlohmann (and so every request field the server reads) keeps the
// last value of a repeated key, so a body or a tool call's arguments with {"a": 1, "a": 2} would be served
// with half of what the client wrote dropped: the server refuses such JSON instead, naming where.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace orbit::serve {

struct RepeatedKey {
  std::string object;  // the object's path, request-field style: "" (the top), "messages[2]", "tools[0].function"
  std::string key;     // the key it gives twice, shortened past 40 bytes
  // "key" at the top, "object.key" below it: the field a 400 names.
  std::string field() const { return object.empty() ? key : object + "." + key; }
};

// The first repeated key in `text`, in document order; nullopt where there is none or `text` is not JSON (the
// caller's parse refuses that). The text is read once, without building a value.
std::optional<RepeatedKey> first_repeated_key(std::string_view text);

// Throws RequestInvalid (request_invalid.h), a 400 naming the repeated field, when the request body `body`
// (parsed already: valid JSON) gives a key twice in one object.
void refuse_repeated_keys(std::string_view body);

}  // namespace orbit::serve

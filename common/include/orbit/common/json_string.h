// JSON string literals, escaped as nlohmann::json's dump() escapes them: one writer for the chat template
// engine's tojson, the constraint grammar's quoted keys and names, and the server's streamed text chunks.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace orbit {

// What append_json_string does with text that is not valid UTF-8 (orbit/common/utf8.h).
enum class InvalidUtf8 {
  kRefuse,  // write nothing and return false: dump() would throw or replace the bytes, the caller decides
  kCopy,    // write the bytes as they are, as every byte from 0x20 up (the chat templates' tojson)
};

// Appends `text` as a JSON string literal, quotes included, to `out`: '"' and '\' as \" and \\, backspace,
// form feed, newline, carriage return and tab as \b \f \n \r \t, every other byte below 0x20 as \u00xx
// (lowercase hex), and every other byte (DEL, '/', all of non-ASCII) as it is, so valid UTF-8 comes out as
// dump() writes it. Returns false with `out` unchanged when `text` is not valid UTF-8 and `invalid` is
// kRefuse; true otherwise.
bool append_json_string(std::string& out, std::string_view text, InvalidUtf8 invalid);

// The number of bytes append_json_string appends for `text` when it writes it (quotes included).
std::size_t json_string_size(std::string_view text);

}  // namespace orbit

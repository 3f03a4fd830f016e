// Request bodies whose strings hold a UTF-16 surrogate escape without its pair ("a\ud800b"). RFC 8259 (8.2)
// allows them and JavaScript's JSON.stringify writes them for a string cut inside an emoji (a tool result
// shortened with .slice()), but no UTF-8 text holds one, and the JSON parser refuses the whole body. The server
// reads each such escape as U+FFFD, the replacement character, as a decoder of ill-formed UTF-16 does.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace orbit::serve {

// `text` with every lone surrogate escape inside a JSON string (\uD800-\uDBFF not followed by an escaped
// \uDC00-\uDFFF, or \uDC00-\uDFFF not preceded by one) written as \uFFFD; nullopt when there is none (the text
// is then used as it is). Text that is not JSON is scanned all the same and left for the parser to refuse.
std::optional<std::string> replace_lone_surrogates(std::string_view text);

}  // namespace orbit::serve

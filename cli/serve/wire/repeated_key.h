// Request bodies that give a key twice are refused (orbit/common/json_repeated_key.h says why), naming where.
#pragma once

#include <string_view>

#include "orbit/common/json_repeated_key.h"

namespace orbit::serve {

using orbit::first_repeated_key;
using orbit::RepeatedKey;

// Throws RequestInvalid (request_invalid.h), a 400 naming the repeated field, when the request body `body`
// (parsed already: valid JSON) gives a key twice in one object.
void refuse_repeated_keys(std::string_view body);

}  // namespace orbit::serve

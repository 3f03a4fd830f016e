#include "serve/wire/call_arguments.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "orbit/common/error.h"
#include "orbit/common/json_input.h"
#include "serve/wire/repeated_key.h"
#include "serve/wire/request_invalid.h"

namespace orbit::serve {

void check_call_arguments(const std::string& text, const std::string& param) {
  if (!nlohmann::json::accept(text)) return;  // not JSON: the template gets the text as a string
  try {
    (void)parse_json_input(text.data(), text.data() + text.size(), "arguments");
  } catch (const Error& e) {
    invalid_field(param, e.what());
  }
  if (const std::optional<RepeatedKey> repeated = first_repeated_key(text)) {
    invalid_field(param,
                  "holds the key " +
                      nlohmann::json(repeated->key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                      " twice in one object: the template would see one of its values");
  }
}

}  // namespace orbit::serve

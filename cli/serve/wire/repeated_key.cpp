#include "serve/wire/repeated_key.h"

#include "serve/wire/request_invalid.h"

namespace orbit::serve {

void refuse_repeated_keys(std::string_view body) {
  if (const std::optional<RepeatedKey> repeated = first_repeated_key(body)) {
    invalid_field(repeated->field(),
                  "given twice in one object; JSON keeps one of the values, so half of what was "
                  "sent would be dropped: send it once");
  }
}

}  // namespace orbit::serve

#include "serve/wire/call_arguments.h"

#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/common/json_input.h"
#include "serve/wire/request_invalid.h"

namespace orbit::serve {

namespace {

using nlohmann::json;

// Walks JSON text as the renderer reads it, stopping at the first key an object gives twice.
class AlteredValue : public nlohmann::json_sax<json> {
 public:
  std::string problem;  // "" while none was found

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& name) override {
    if (keys_.back().insert(name).second) return true;
    problem = "holds the key " + json(shown(name)).dump(-1, ' ', false, json::error_handler_t::replace) +
              " twice in one object: the template would see one of its values";
    return false;
  }
  bool end_object() override {
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  static std::string shown(const std::string& text) { return text.size() > 40 ? text.substr(0, 40) + "..." : text; }

  std::vector<std::set<std::string>> keys_;  // the keys of each open object, innermost last
};

}  // namespace

void check_call_arguments(const std::string& text, const std::string& param) {
  if (!json::accept(text)) return;  // not JSON: the template gets the text as a string
  try {
    (void)parse_json_input(text.data(), text.data() + text.size(), "arguments");
  } catch (const Error& e) {
    invalid_field(param, e.what());
  }
  AlteredValue walk;
  json::sax_parse(text, &walk);
  if (!walk.problem.empty()) invalid_field(param, walk.problem);
}

}  // namespace orbit::serve

#include "serve/wire/repeated_key.h"

#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "serve/wire/request_invalid.h"

namespace orbit::serve {

namespace {

using nlohmann::json;

// Walks JSON text keeping each open container's keys (objects) or next index (arrays) and the path to it,
// stopping at the first key an object gives twice.
class RepeatedKeyWalk : public nlohmann::json_sax<json> {
 public:
  std::optional<RepeatedKey> found;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override {
    open(true);
    return true;
  }
  bool key(string_t& name) override {
    Frame& f = frames_.back();
    if (f.keys.insert(name).second) {
      f.next = name;
      return true;
    }
    found = RepeatedKey{f.path, name.size() > 40 ? name.substr(0, 40) + "..." : name};
    return false;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override {
    open(false);
    return true;
  }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  struct Frame {
    std::string path;
    bool object = false;
    std::set<std::string> keys;
    std::string next;   // object: the key of the value that comes next
    int64_t index = 0;  // array: the index of the value that comes next
  };

  // The path of the value about to be read.
  std::string child_path() const {
    if (frames_.empty()) return "";
    const Frame& f = frames_.back();
    if (!f.object) return f.path + "[" + std::to_string(f.index) + "]";
    return f.path.empty() ? f.next : f.path + "." + f.next;
  }
  void open(bool object) {
    Frame f;
    f.path = child_path();
    f.object = object;
    frames_.push_back(std::move(f));
  }
  bool close() {
    frames_.pop_back();
    return value();
  }
  bool value() {  // a value ended in the innermost container
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
    return true;
  }

  std::vector<Frame> frames_;
};

}  // namespace

std::optional<RepeatedKey> first_repeated_key(std::string_view text) {
  RepeatedKeyWalk walk;
  (void)json::sax_parse(text.begin(), text.end(), &walk);
  return walk.found;
}

void refuse_repeated_keys(std::string_view body) {
  if (const std::optional<RepeatedKey> repeated = first_repeated_key(body)) {
    invalid_field(repeated->field(),
                  "given twice in one object; JSON keeps one of the values, so half of what was "
                  "sent would be dropped: send it once");
  }
}

}  // namespace orbit::serve

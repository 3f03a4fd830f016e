// The first key a JSON object gives twice. nlohmann (like Python's json module) keeps the last value of a
// repeated key, so {"chunk": "a", "chunk": "b"} would be read as if "a" were never written: readers of
// hand-written inputs (request bodies, trace files) refuse such JSON instead, naming where.
//
// Read with nlohmann's SAX parser, which builds nothing: one pass over the text, a set of keys per open object.
// Header-only (needs nlohmann_json, which every user of it links already).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "orbit/common/json_error_path.h"

namespace orbit {

struct RepeatedKey {
  std::string object;  // the object's path, request-field style: "" (the top), "messages[2]", "tools[0].function"
  std::string key;     // the key it gives twice, shortened past 40 bytes
  // "key" at the top, "object.key" below it.
  std::string field() const { return object.empty() ? key : object + "." + key; }
};

namespace detail {

// Walks JSON text keeping each open container's keys (objects) or next index (arrays) and the path to it,
// stopping at the first key an object gives twice.
class RepeatedKeyWalk : public JsonSaxScalars<RepeatedKeyWalk> {
 public:
  friend class JsonSaxScalars<RepeatedKeyWalk>;
  std::optional<RepeatedKey> found;

  bool start_object(std::size_t) { return open(true); }
  bool start_array(std::size_t) { return open(false); }
  bool key(json::string_t& name) {
    Frame& f = frames_.back();
    if (f.keys.insert(name).second) {
      f.next = name;
      return true;
    }
    found = RepeatedKey{f.path, name.size() > 40 ? name.substr(0, 40) + "..." : name};
    return false;
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

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
  bool open(bool object) {
    Frame f;
    f.path = child_path();
    f.object = object;
    frames_.push_back(std::move(f));
    return true;
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

}  // namespace detail

// The first repeated key in `text`, in document order; nullopt where there is none or `text` is not JSON (the
// caller's parse refuses that).
inline std::optional<RepeatedKey> first_repeated_key(std::string_view text) {
  detail::RepeatedKeyWalk walk;
  (void)nlohmann::json::sax_parse(text.begin(), text.end(), &walk);
  return walk.found;
}

}  // namespace orbit

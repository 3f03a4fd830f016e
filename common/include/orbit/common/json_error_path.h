// Where a JSON text stops being valid, as the path of the value it was reading ("messages[2].content",
// "temperature"), so that an error about a request body names the field at fault, not the body alone.
//
// Read with nlohmann's SAX parser, which builds nothing: linear in the text, for the error path only (call it once
// parse_json_input has refused the text). Header-only (needs nlohmann_json, which every user of it links already).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace orbit {

namespace detail {

// The scalar events of nlohmann's SAX interface, each passed on as Derived::value() (a value read whole): the
// walks below differ only in how containers and keys are followed.
template <typename Derived>
class JsonSaxScalars {
 public:
  using json = nlohmann::json;

  bool null() { return self().value(); }
  bool boolean(bool) { return self().value(); }
  bool number_integer(json::number_integer_t) { return self().value(); }
  bool number_unsigned(json::number_unsigned_t) { return self().value(); }
  bool number_float(json::number_float_t, const json::string_t&) { return self().value(); }
  bool string(json::string_t&) { return self().value(); }
  bool binary(json::binary_t&) { return self().value(); }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

// SAX events kept as the containers open around the value being read.
class JsonPathTracker : public JsonSaxScalars<JsonPathTracker> {
 public:
  friend class JsonSaxScalars<JsonPathTracker>;
  bool start_object(std::size_t) { return open(false); }
  bool start_array(std::size_t) { return open(true); }
  bool key(json::string_t& k) {
    frames_.back().key = k;
    frames_.back().key_open = true;
    return true;
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    failed_ = true;
    return false;
  }

  bool failed() const { return failed_; }
  // The path of the value being read when the text failed: each open container's member (".key" or "[i]"),
  // down to the innermost one's element in progress (or its next element, or nothing where it was between a
  // value and the next key).
  std::string path() const {
    std::string out;
    for (std::size_t i = 0; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      const bool innermost = i + 1 == frames_.size();
      if (f.array) {
        out += "[" + std::to_string(innermost ? f.count : f.count - 1) + "]";
      } else if (f.key_open) {
        out += (out.empty() ? "" : ".") + f.key;
      } else {
        break;
      }
    }
    return out;
  }

 private:
  struct Frame {
    bool array = false;
    std::size_t count = 0;  // arrays: the elements begun
    std::string key;        // objects: the last key read
    bool key_open = false;  // objects: its value not read whole yet
  };

  // A value begins in the innermost container: an array counts it.
  void begin() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().count;
  }
  // A scalar read whole: its object's key is closed.
  bool value() {
    begin();
    if (!frames_.empty() && !frames_.back().array) frames_.back().key_open = false;
    return true;
  }
  bool open(bool array) {
    begin();
    frames_.push_back(Frame{array, 0, "", false});
    return true;
  }
  bool close() {
    frames_.pop_back();
    if (!frames_.empty() && !frames_.back().array) frames_.back().key_open = false;
    return true;
  }

  std::vector<Frame> frames_;
  bool failed_ = false;
};

}  // namespace detail

// The path in [first, last) of the value nlohmann's parser was reading where the text stops being valid JSON
// (a number out of range, a bad escape, a missing comma): "messages[2].content", "temperature", "tools[0]"; ""
// where the text is valid, or fails before any member (at its first byte, or between a value and the next key of
// the root object).
inline std::string json_error_path(const char* first, const char* last) {
  detail::JsonPathTracker tracker;
  nlohmann::json::sax_parse(first, last, &tracker, nlohmann::json::input_format_t::json, true);
  return tracker.failed() ? tracker.path() : std::string();
}

}  // namespace orbit

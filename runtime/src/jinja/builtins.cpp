// Filters, tests, methods and global functions of the chat-template interpreter. Every name outside
// these tables is refused with an error that names it and lists what is supported.
#include <ctime>

#include "orbit/common/error.h"
#include "src/jinja/interpreter.h"

namespace orbit::runtime::jinja {

namespace {

using K = Value::Kind;

const char* const kSpace = " \t\n\r\f\v";

std::string strip(const std::string& s, const std::string& chars, bool left, bool right) {
  std::size_t b = 0, e = s.size();
  if (left) {
    while (b < e && chars.find(s[b]) != std::string::npos) ++b;
  }
  if (right) {
    while (e > b && chars.find(s[e - 1]) != std::string::npos) --e;
  }
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}
std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return s;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
  return s;
}

const std::string& want_string(const Value& v, const std::string& what, const std::string& where) {
  if (!v.is(K::kString)) ORBIT_FAIL(where << ": " << what << " needs a string, got " << kind_name(v.kind));
  return v.s;
}

const Value* kwarg(const Dict& kw, const char* name) {
  for (const auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return nullptr;
}

List items_of(const Value& d) {
  List out;
  for (const auto& [k, v] : *d.dict) out.push_back(Value::of_list({Value::string(k), v}));
  return out;
}

int64_t length_of(const Value& v, const std::string& where) {
  switch (v.kind) {
    case K::kString: {
      int64_t n = 0;  // code points, as JavaScript counts them (UTF-16 units for astral ones aside)
      for (unsigned char c : v.s) n += (c & 0xC0) != 0x80 ? ((c >= 0xF0) ? 2 : 1) : 0;
      return n;
    }
    case K::kList: return static_cast<int64_t>(v.list->size());
    case K::kDict:
    case K::kNamespace: return static_cast<int64_t>(v.dict->size());
    default: ORBIT_FAIL(where << ": length of a " << kind_name(v.kind) << " is not defined");
  }
}

// The attribute `name` of `v` (dotted paths allowed), undefined when absent.
Value attribute(const Value& v, const std::string& name) {
  Value cur = v;
  std::size_t b = 0;
  while (b <= name.size()) {
    const std::size_t e = std::min(name.find('.', b), name.size());
    const Value* next = cur.is_mapping() ? cur.find(name.substr(b, e - b)) : nullptr;
    if (next == nullptr) return Value();
    cur = *next;
    b = e + 1;
  }
  return cur;
}

// select / reject / selectattr / rejectattr.
Value select(const Value& input, const List& args, bool by_attr, bool keep, const std::string& where) {
  if (!input.is(K::kList)) ORBIT_FAIL(where << ": select filters need a list, got " << kind_name(input.kind));
  std::size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.empty()) ORBIT_FAIL(where << ": selectattr/rejectattr need an attribute name");
    attr = want_string(args[next++], "selectattr's attribute", where);
  }
  const std::string test = next < args.size() ? want_string(args[next++], "a test name", where) : "";
  const List test_args(args.begin() + static_cast<std::ptrdiff_t>(next), args.end());
  List out;
  for (const Value& item : *input.list) {
    const Value subject = by_attr ? attribute(item, attr) : item;
    const bool pass = test.empty() ? truthy(subject) : apply_test(test, subject, test_args, where);
    if (pass == keep) out.push_back(item);
  }
  return Value::of_list(std::move(out));
}

Value map_filter(const Value& input, const List& args, const Dict& kw, const std::string& where) {
  if (!input.is(K::kList)) ORBIT_FAIL(where << ": map needs a list, got " << kind_name(input.kind));
  List out;
  if (const Value* attr = kwarg(kw, "attribute")) {
    const std::string& name = want_string(*attr, "map's attribute", where);
    const Value* fallback = kwarg(kw, "default");
    for (const Value& item : *input.list) {
      Value v = attribute(item, name);
      out.push_back(v.is(K::kUndefined) && fallback != nullptr ? *fallback : v);
    }
    return Value::of_list(std::move(out));
  }
  if (args.empty()) ORBIT_FAIL(where << ": map needs attribute= or a filter name");
  const std::string& filter = want_string(args[0], "map's filter", where);
  const List rest(args.begin() + 1, args.end());
  for (const Value& item : *input.list) out.push_back(apply_filter(filter, item, rest, {}, where));
  return Value::of_list(std::move(out));
}

Value string_filter(const std::string& name, const std::string& s, const List& args, const std::string& where) {
  if (name == "trim") return Value::string(strip(s, kSpace, true, true));
  if (name == "upper") return Value::string(upper(s));
  if (name == "lower") return Value::string(lower(s));
  if (name == "capitalize") return Value::string(s.empty() ? s : upper(s.substr(0, 1)) + lower(s.substr(1)));
  if (name == "replace") {
    if (args.size() < 2) ORBIT_FAIL(where << ": replace needs two arguments");
    return Value::string(
        replace_all(s, want_string(args[0], "replace", where), want_string(args[1], "replace", where)));
  }
  return Value();
}

}  // namespace

Value apply_filter(const std::string& name, const Value& input, const List& args, const Dict& kwargs,
                   const std::string& where) {
  if (input.is(K::kString)) {
    Value v = string_filter(name, input.s, args, where);
    if (!v.is(K::kUndefined)) return v;
  }
  if (name == "length" || name == "count") return Value::integer(length_of(input, where));
  if (name == "string") return Value::string(to_output(input));
  if (name == "tojson") {
    JsonStyle style;
    const Value* indent = kwarg(kwargs, "indent");
    if (indent == nullptr && !args.empty()) indent = &args[0];
    if (indent != nullptr && indent->is(K::kInt)) style.indent = static_cast<int>(indent->i);
    return Value::string(to_json(input, style));
  }
  if (name == "items") {
    if (!input.is_mapping()) ORBIT_FAIL(where << ": items needs a dict, got " << kind_name(input.kind));
    return Value::of_list(items_of(input));
  }
  if (name == "list") {
    if (input.is(K::kList)) return Value::of_list(*input.list);
    if (input.is_mapping()) {
      List keys;
      for (const auto& kv : *input.dict) keys.push_back(Value::string(kv.first));
      return Value::of_list(std::move(keys));
    }
    ORBIT_FAIL(where << ": list of a " << kind_name(input.kind) << " is not supported");
  }
  if (name == "first" || name == "last") {
    if (!input.is(K::kList)) ORBIT_FAIL(where << ": " << name << " needs a list");
    if (input.list->empty()) return Value();
    return name == "first" ? input.list->front() : input.list->back();
  }
  if (name == "join") {
    if (!input.is(K::kList)) ORBIT_FAIL(where << ": join needs a list");
    const std::string sep = args.empty() ? "" : want_string(args[0], "join's separator", where);
    std::string out;
    for (std::size_t k = 0; k < input.list->size(); ++k) out += (k ? sep : "") + to_output((*input.list)[k]);
    return Value::string(out);
  }
  if (name == "default" || name == "d") {
    const bool boolean = args.size() > 1 && truthy(args[1]);
    const bool use = input.is(K::kUndefined) || (boolean && !truthy(input));
    return use ? (args.empty() ? Value::string("") : args[0]) : input;
  }
  if (name == "select" || name == "reject") return select(input, args, false, name == "select", where);
  if (name == "selectattr" || name == "rejectattr") return select(input, args, true, name == "selectattr", where);
  if (name == "map") return map_filter(input, args, kwargs, where);
  if (name == "int" && input.is_number()) return Value::integer(static_cast<int64_t>(input.number()));
  if (name == "float" && input.is_number()) return Value::floating(input.number());
  ORBIT_FAIL(where << ": unsupported filter '" << name << "' on a " << kind_name(input.kind)
                   << " (supported: trim, upper, lower, capitalize, replace, length, count, string, tojson, items, "
                      "list, first, last, join, default, select, reject, selectattr, rejectattr, map, int, float)");
}

bool apply_test(const std::string& name, const Value& v, const List& args, const std::string& where) {
  if (name == "defined") return !v.is(K::kUndefined);
  if (name == "undefined") return v.is(K::kUndefined);
  if (name == "none") return v.is(K::kNone);
  if (name == "string") return v.is(K::kString);
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is(K::kInt);
  if (name == "float") return v.is(K::kFloat);
  if (name == "boolean") return v.is(K::kBool);
  if (name == "true") return v.is(K::kBool) && v.b;
  if (name == "false") return v.is(K::kBool) && !v.b;
  if (name == "mapping") return v.is(K::kDict);
  if (name == "sequence" || name == "iterable") return v.is(K::kList) || v.is(K::kString) || v.is(K::kDict);
  if (name == "callable") return v.is(K::kFunction);
  if (name == "odd" || name == "even") {
    if (!v.is(K::kInt)) ORBIT_FAIL(where << ": test '" << name << "' needs an integer");
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "equalto" || name == "eq" || name == "==" || name == "ne" || name == "!=") {
    if (args.empty()) ORBIT_FAIL(where << ": test '" << name << "' needs a value to compare with");
    const bool same = equal(v, args[0]);
    return (name == "ne" || name == "!=") ? !same : same;
  }
  ORBIT_FAIL(where << ": unsupported test '" << name
                   << "' (supported: defined, undefined, none, string, number, integer, float, boolean, true, false, "
                      "mapping, sequence, iterable, callable, odd, even, equalto, eq, ne)");
}

namespace {

Value string_method(const std::string& s, const std::string& name, const std::string& where) {
  auto chars = [](const List& a) { return a.empty() || !a[0].is(K::kString) ? std::string(kSpace) : a[0].s; };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return Value::function([s, name, chars](const List& a, const Dict&) {
      return Value::string(strip(s, chars(a), name != "rstrip", name != "lstrip"));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return Value::function([s, name, where](const List& a, const Dict& kw) {
      return apply_filter(name == "title" ? "capitalize" : name, Value::string(s), a, kw, where);
    });
  }
  if (name == "startswith" || name == "endswith") {
    return Value::function([s, name, where](const List& a, const Dict&) {
      if (a.empty()) ORBIT_FAIL(where << ": " << name << " needs an argument");
      const std::string& p = want_string(a[0], name, where);
      const bool starts = s.compare(0, p.size(), p) == 0;
      const bool ends = s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
      return Value::boolean(name == "startswith" ? starts : ends);
    });
  }
  if (name == "split") {
    return Value::function([s, where](const List& a, const Dict&) {
      List parts;
      if (a.empty() || a[0].is(K::kNone)) {  // on runs of whitespace
        std::size_t b = 0;
        while (true) {
          b = s.find_first_not_of(kSpace, b);
          if (b == std::string::npos) break;
          const std::size_t e = std::min(s.find_first_of(kSpace, b), s.size());
          parts.push_back(Value::string(s.substr(b, e - b)));
          b = e;
        }
        return Value::of_list(std::move(parts));
      }
      const std::string& sep = want_string(a[0], "split's separator", where);
      if (sep.empty()) ORBIT_FAIL(where << ": split with an empty separator");
      std::size_t b = 0;
      for (std::size_t p = s.find(sep); p != std::string::npos; p = s.find(sep, b)) {
        parts.push_back(Value::string(s.substr(b, p - b)));
        b = p + sep.size();
      }
      parts.push_back(Value::string(s.substr(b)));
      return Value::of_list(std::move(parts));
    });
  }
  if (name == "replace") {
    return Value::function(
        [s, where](const List& a, const Dict& kw) { return apply_filter("replace", Value::string(s), a, kw, where); });
  }
  return Value();
}

}  // namespace

Value method(const Value& receiver, const std::string& name, const std::string& where) {
  if (receiver.is(K::kString)) {
    Value m = string_method(receiver.s, name, where);
    if (!m.is(K::kUndefined)) return m;
    if (name == "length") return Value::integer(length_of(receiver, where));
  }
  if (receiver.is_mapping()) {
    if (name == "items")
      return Value::function([receiver](const List&, const Dict&) { return Value::of_list(items_of(receiver)); });
    if (name == "keys" || name == "values") {
      return Value::function([receiver, name](const List&, const Dict&) {
        List out;
        for (const auto& [k, v] : *receiver.dict) out.push_back(name == "keys" ? Value::string(k) : v);
        return Value::of_list(std::move(out));
      });
    }
    if (name == "get") {
      return Value::function([receiver](const List& a, const Dict&) {
        const Value* v = !a.empty() && a[0].is(K::kString) ? receiver.find(a[0].s) : nullptr;
        return v != nullptr ? *v : (a.size() > 1 ? a[1] : Value::none());
      });
    }
    return Value();  // a missing key is undefined
  }
  if (receiver.is(K::kList) && name == "length") return Value::integer(static_cast<int64_t>(receiver.list->size()));
  return Value();
}

void add_builtin_globals(Dict& globals, const std::string& where) {
  globals.emplace_back(
      "raise_exception", Value::function([where](const List& a, const Dict&) -> Value {
        ORBIT_FAIL(where << ": the template raised an exception: " << (a.empty() ? std::string() : to_output(a[0])));
      }));
  globals.emplace_back("namespace",
                       Value::function([](const List&, const Dict& kw) { return Value::of_dict(kw, K::kNamespace); }));
  globals.emplace_back("range", Value::function([where](const List& a, const Dict&) {
                         int64_t b = 0, e = 0, step = 1;
                         for (const Value& v : a) {
                           if (!v.is(K::kInt)) ORBIT_FAIL(where << ": range needs integers");
                         }
                         if (a.size() == 1)
                           e = a[0].i;
                         else if (a.size() >= 2)
                           b = a[0].i, e = a[1].i, step = a.size() > 2 ? a[2].i : 1;
                         if (step == 0) ORBIT_FAIL(where << ": range step cannot be zero");
                         List out;
                         for (int64_t k = b; step > 0 ? k < e : k > e; k += step) out.push_back(Value::integer(k));
                         return Value::of_list(std::move(out));
                       }));
  globals.emplace_back("strftime_now", Value::function([where](const List& a, const Dict&) {
                         const std::string fmt = want_string(a.empty() ? Value() : a[0], "strftime_now", where);
                         const std::time_t now = std::time(nullptr);
                         std::tm local{};
                         localtime_r(&now, &local);
                         char buf[256];
                         const std::size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &local);
                         return Value::string(std::string(buf, n));
                       }));
}

}  // namespace orbit::runtime::jinja

// Filters, tests, methods and global functions of the chat-template interpreter. Every name outside
// these tables is refused with an error that names it and lists what is supported. Each charges the
// rendering's budget (limits.h) for the lists it builds or scans, and checks a string's size before
// building it; the interpreter charges every string a call returns.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <utility>
#include <vector>

#include "orbit/common/error.h"
#include "src/jinja/interpreter.h"
#include "src/jinja/text_units.h"

namespace orbit::runtime::jinja {

namespace {

using K = Value::Kind;

// `s` with `to` before every code point and at the end, at most `limit` times (Python's str.replace with an
// empty `old`).
std::string insert_everywhere(const std::string& s, const std::string& to, std::size_t limit, const Site& at) {
  const std::size_t points = count_code_points(s);
  const std::size_t count = std::min(limit, points + 1);  // before each code point, then at the end
  std::size_t growth = 0;
  if (__builtin_mul_overflow(count, to.size(), &growth)) growth = SIZE_MAX - s.size();
  check_string_size(s.size() + std::min(growth, SIZE_MAX - s.size()), "replace", at);
  std::string out;
  std::size_t k = 0;
  for (std::size_t i = 0; i < s.size(); ++k) {
    const std::size_t next = code_point_end(s, i);
    if (k < count) out += to;
    out.append(s, i, next - i);
    i = next;
  }
  if (count == points + 1) out += to;
  return out;
}

// `s` with the first `limit` occurrences of `from` replaced by `to`, left to right; refused when the result
// would pass kMaxStringBytes (its size is known before it is built).
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, std::size_t limit,
                        const Site& at) {
  if (from.empty()) return insert_everywhere(s, to, limit, at);
  std::size_t count = 0;
  at.budget().work(s.size() + from.size(), at);  // scanned
  for (std::size_t p = find_text(s, from); p != std::string::npos && count < limit;
       p = find_text(s, from, p + from.size())) {
    ++count;
  }
  if (to.size() > from.size()) {
    std::size_t growth = 0;
    if (__builtin_mul_overflow(count, to.size() - from.size(), &growth)) growth = SIZE_MAX - s.size();
    check_string_size(s.size() + growth, "replace", at);
  }
  std::string out;
  std::size_t b = 0;
  for (std::size_t p = find_text(s, from), k = 0; p != std::string::npos && k < count; p = find_text(s, from, b), ++k) {
    out.append(s, b, p - b);
    out += to;
    b = p + from.size();
  }
  out.append(s, b, std::string::npos);
  return out;
}

const std::string& want_string(const Value& v, const std::string& what, const Site& at) {
  if (!v.is(K::kString)) ORBIT_FAIL(at << ": " << what << " needs a string, got " << kind_name(v.kind));
  return v.s;
}

const Value* kwarg(const Dict& kw, const char* name) {
  for (const auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return nullptr;
}

List items_of(const Value& d, const Site& at) {
  List out;
  std::size_t bytes = 0;
  for (const auto& [k, v] : *d.dict) {
    bytes += 2 * sizeof(Value) + k.size() + footprint(v);
    out.push_back(Value::of_list({Value::string(k), v}));
  }
  at.budget().work(bytes, at);
  return out;
}

int64_t length_of(const Value& v, const Site& at) {
  switch (v.kind) {
    case K::kString:  // code points, as Python counts them; the scan is charged
      at.budget().work(v.s.size(), at);
      return static_cast<int64_t>(count_code_points(v.s));
    case K::kList: return static_cast<int64_t>(v.list->size());
    case K::kDict:
    case K::kNamespace: return static_cast<int64_t>(v.dict->size());
    default: ORBIT_FAIL(at << ": length of a " << kind_name(v.kind) << " is not defined");
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
Value select(const Value& input, const List& args, bool by_attr, bool keep, const Site& at) {
  if (!input.is(K::kList)) ORBIT_FAIL(at << ": select filters need a list, got " << kind_name(input.kind));
  at.budget().work(footprint(*input.list), at);  // scanned, and at most copied
  std::size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.empty()) ORBIT_FAIL(at << ": selectattr/rejectattr need an attribute name");
    attr = want_string(args[next++], "selectattr's attribute", at);
  }
  const std::string test = next < args.size() ? want_string(args[next++], "a test name", at) : "";
  const List test_args(args.begin() + static_cast<std::ptrdiff_t>(next), args.end());
  List out;
  for (const Value& item : *input.list) {
    const Value subject = by_attr ? attribute(item, attr) : item;
    const bool pass = test.empty() ? truthy(subject) : apply_test(test, subject, test_args, at);
    if (pass == keep) out.push_back(item);
  }
  return Value::of_list(std::move(out));
}

Value map_filter(const Value& input, const List& args, const Dict& kw, const Site& at) {
  if (!input.is(K::kList)) ORBIT_FAIL(at << ": map needs a list, got " << kind_name(input.kind));
  at.budget().work(input.list->size() * sizeof(Value), at);  // scanned
  List out;
  if (const Value* attr = kwarg(kw, "attribute")) {
    const std::string& name = want_string(*attr, "map's attribute", at);
    const Value* fallback = kwarg(kw, "default");
    for (const Value& item : *input.list) {
      Value v = attribute(item, name);
      out.push_back(v.is(K::kUndefined) && fallback != nullptr ? *fallback : v);
    }
    at.budget().work(footprint(out), at);
    return Value::of_list(std::move(out));
  }
  if (args.empty()) ORBIT_FAIL(at << ": map needs attribute= or a filter name");
  const std::string& filter = want_string(args[0], "map's filter", at);
  const List rest(args.begin() + 1, args.end());
  for (const Value& item : *input.list) out.push_back(apply_filter(filter, item, rest, {}, at));
  at.budget().work(footprint(out), at);
  return Value::of_list(std::move(out));
}

// A case mapping's result, whose size is checked once it is known (one code point may map to three).
Value mapped(std::string s, const char* name, const Site& at) {
  check_string_size(s.size(), name, at);
  return Value::string(std::move(s));
}

// replace's count (Python's third argument, the filter's count=): how many to replace; all when absent or None.
std::size_t replace_limit(const List& args, const Dict& kwargs, const Site& at) {
  const Value* count = args.size() > 2 ? &args[2] : kwarg(kwargs, "count");
  if (count == nullptr || count->is(K::kNone)) return SIZE_MAX;
  if (!count->is(K::kInt)) ORBIT_FAIL(at << ": replace's count needs an integer, got " << kind_name(count->kind));
  return count->i < 0 ? SIZE_MAX : static_cast<std::size_t>(count->i);
}

// int and float of a string, as Jinja's filters read one: the number it spells (surrounding whitespace allowed; int
// of a decimal truncated toward zero), else the filter's default (its first argument or `default`, 0 or 0.0).
Value number_of_text(const std::string& name, const std::string& s, const List& args, const Dict& kwargs,
                     const Site& at) {
  const Value* given = args.empty() ? kwarg(kwargs, "default") : &args[0];
  const bool integer = name == "int";
  const Value fallback = given != nullptr ? *given : integer ? Value::integer(0) : Value::floating(0.0);
  const std::string text = strip_code_points(s, nullptr, true, true);
  if (text.empty()) return fallback;
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  if (integer) {
    const long long i = std::strtoll(begin, &end, 10);
    if (end == begin + text.size() && errno == 0) return Value::integer(i);
  }
  errno = 0;
  const double f = std::strtod(begin, &end);
  if (end != begin + text.size() || errno != 0 || !std::isfinite(f)) return fallback;
  if (!integer) return Value::floating(f);
  const double whole = std::trunc(f);
  if (!(whole >= -0x1p63 && whole < 0x1p63)) {
    ORBIT_FAIL(at << ": int: '" << text << "' is out of the 64-bit integer range");
  }
  return Value::integer(static_cast<int64_t>(whole));
}

Value string_filter(const std::string& name, const std::string& s, const List& args, const Dict& kwargs,
                    const Site& at) {
  if (name == "trim") {
    const Value* chars = args.empty() ? kwarg(kwargs, "chars") : &args[0];
    const bool given = chars != nullptr && !chars->is(K::kNone);
    return Value::string(strip_code_points(s, given ? &want_string(*chars, "trim's chars", at) : nullptr, true, true));
  }
  if (name == "upper") return mapped(to_upper(s), "upper", at);
  if (name == "lower") return mapped(to_lower(s), "lower", at);
  if (name == "capitalize") return mapped(capitalize(s), "capitalize", at);
  if (name == "title") return mapped(title_words(s), "title", at);
  if (name == "int" || name == "float") return number_of_text(name, s, args, kwargs, at);
  if (name == "replace") {
    if (args.size() < 2) ORBIT_FAIL(at << ": replace needs two arguments");
    return Value::string(replace_all(s, want_string(args[0], "replace", at), want_string(args[1], "replace", at),
                                     replace_limit(args, kwargs, at), at));
  }
  return Value();
}

}  // namespace

Value apply_filter(const std::string& name, const Value& input, const List& args, const Dict& kwargs, const Site& at) {
  if (input.is(K::kString)) {
    Value v = string_filter(name, input.s, args, kwargs, at);
    if (!v.is(K::kUndefined)) return v;
  }
  if (name == "length" || name == "count") return Value::integer(length_of(input, at));
  if (name == "string") return Value::string(to_output(input, at));
  if (name == "tojson") {
    JsonStyle style;
    const Value* indent = kwarg(kwargs, "indent");
    if (indent == nullptr && !args.empty()) indent = &args[0];
    if (indent != nullptr && indent->is(K::kInt)) {
      if (indent->i < 0) ORBIT_FAIL(at << ": tojson: indent must not be negative, got " << indent->i);
      style.indent = static_cast<uint64_t>(indent->i) > kMaxStringBytes ? kMaxStringBytes + 1
                                                                        : static_cast<std::size_t>(indent->i);
    }
    return Value::string(to_json(input, style, at));
  }
  if (name == "items") {
    if (!input.is_mapping()) ORBIT_FAIL(at << ": items needs a dict, got " << kind_name(input.kind));
    return Value::of_list(items_of(input, at));
  }
  if (name == "list") {
    if (input.is(K::kList)) {
      at.budget().work(footprint(*input.list), at);
      return Value::of_list(*input.list);
    }
    if (input.is_mapping()) {
      List keys;
      for (const auto& kv : *input.dict) keys.push_back(Value::string(kv.first));
      at.budget().work(footprint(keys), at);
      return Value::of_list(std::move(keys));
    }
    ORBIT_FAIL(at << ": list of a " << kind_name(input.kind) << " is not supported");
  }
  if (name == "first" || name == "last") {
    if (!input.is(K::kList)) ORBIT_FAIL(at << ": " << name << " needs a list");
    if (input.list->empty()) return Value();
    return name == "first" ? input.list->front() : input.list->back();
  }
  if (name == "join") {
    if (!input.is(K::kList)) ORBIT_FAIL(at << ": join needs a list");
    const std::string sep = args.empty() ? "" : want_string(args[0], "join's separator", at);
    at.budget().work(input.list->size() * sizeof(Value), at);  // scanned
    std::string out;
    for (std::size_t k = 0; k < input.list->size(); ++k) {
      const std::string item = to_output((*input.list)[k], at);
      check_string_size(out.size() + (k ? sep.size() : 0) + item.size(), "join", at);
      if (k > 0) out += sep;
      out += item;
    }
    return Value::string(std::move(out));
  }
  if (name == "default" || name == "d") {
    const bool boolean = args.size() > 1 && truthy(args[1]);
    const bool use = input.is(K::kUndefined) || (boolean && !truthy(input));
    return use ? (args.empty() ? Value::string("") : args[0]) : input;
  }
  if (name == "select" || name == "reject") return select(input, args, false, name == "select", at);
  if (name == "selectattr" || name == "rejectattr") return select(input, args, true, name == "selectattr", at);
  if (name == "map") return map_filter(input, args, kwargs, at);
  if (name == "int" && input.is(K::kInt)) return input;
  if (name == "int" && input.is(K::kFloat)) {
    // Rounded down, as @huggingface/jinja does (Math.floor); converting a double outside int64's range (or
    // NaN) is undefined, so it is refused.
    const double f = std::floor(input.f);
    if (!(f >= -0x1p63 && f < 0x1p63)) {
      ORBIT_FAIL(at << ": int: " << to_output(input, at) << " is out of the 64-bit integer range");
    }
    return Value::integer(static_cast<int64_t>(f));
  }
  if (name == "float" && input.is_number()) return Value::floating(input.number());
  ORBIT_FAIL(at << ": unsupported filter '" << name << "' on a " << kind_name(input.kind)
                << " (supported: trim, upper, lower, capitalize, title, replace, length, count, string, tojson, items, "
                   "list, first, last, join, default, select, reject, selectattr, rejectattr, map, int, float)");
}

bool apply_test(const std::string& name, const Value& v, const List& args, const Site& at) {
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
    if (!v.is(K::kInt)) ORBIT_FAIL(at << ": test '" << name << "' needs an integer");
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "equalto" || name == "eq" || name == "==" || name == "ne" || name == "!=") {
    if (args.empty()) ORBIT_FAIL(at << ": test '" << name << "' needs a value to compare with");
    const bool same = equal(v, args[0]);
    return (name == "ne" || name == "!=") ? !same : same;
  }
  ORBIT_FAIL(at << ": unsupported test '" << name
                << "' (supported: defined, undefined, none, string, number, integer, float, boolean, true, false, "
                   "mapping, sequence, iterable, callable, odd, even, equalto, eq, ne)");
}

namespace {

// The parts of `s` split at each `sep`, or at runs of whitespace when `sep` is null. Counted, and charged,
// before any is built: a short string can hold many separators. `visit(b, e)` sees each part's [b, e).
template <typename Visit>
void split_spans(const std::string& s, const std::string* sep, Visit visit) {
  if (sep == nullptr) {
    for (const auto& [b, e] : whitespace_parts(s)) visit(b, e);
    return;
  }
  std::size_t b = 0;
  for (std::size_t p = find_text(s, *sep); p != std::string::npos; p = find_text(s, *sep, b)) {
    visit(b, p);
    b = p + sep->size();
  }
  visit(b, s.size());
}

List split(const std::string& s, const std::string* sep, const Site& at) {
  std::size_t n = 0;
  split_spans(s, sep, [&](std::size_t, std::size_t) { ++n; });
  at.budget().work(n * sizeof(Value) + s.size(), at);
  List parts;
  parts.reserve(n);
  split_spans(s, sep, [&](std::size_t b, std::size_t e) { parts.push_back(Value::string(s.substr(b, e - b))); });
  return parts;
}

Value string_method(const std::string& s, const std::string& name) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return Value::function([s, name](const List& a, const Dict&, const Site& at) {
      const bool given = !a.empty() && !a[0].is(K::kNone);  // None, as no argument: whitespace
      const std::string* chars = given ? &want_string(a[0], name + "'s chars", at) : nullptr;
      return Value::string(strip_code_points(s, chars, name != "rstrip", name != "lstrip"));
    });
  }
  if (name == "title") {
    return Value::function([s](const List&, const Dict&, const Site& at) { return mapped(title(s), "title", at); });
  }
  if (name == "upper" || name == "lower" || name == "capitalize") {
    return Value::function([s, name](const List& a, const Dict& kw, const Site& at) {
      return apply_filter(name, Value::string(s), a, kw, at);
    });
  }
  if (name == "startswith" || name == "endswith") {
    return Value::function([s, name](const List& a, const Dict&, const Site& at) {
      if (a.empty()) ORBIT_FAIL(at << ": " << name << " needs an argument");
      const std::string& p = want_string(a[0], name, at);
      const bool starts = s.compare(0, p.size(), p) == 0;
      const bool ends = s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
      return Value::boolean(name == "startswith" ? starts : ends);
    });
  }
  if (name == "split") {
    return Value::function([s](const List& a, const Dict&, const Site& at) {
      if (a.empty() || a[0].is(K::kNone)) return Value::of_list(split(s, nullptr, at));  // on runs of whitespace
      const std::string& sep = want_string(a[0], "split's separator", at);
      if (sep.empty()) ORBIT_FAIL(at << ": split with an empty separator");
      return Value::of_list(split(s, &sep, at));
    });
  }
  if (name == "replace") {
    return Value::function([s](const List& a, const Dict& kw, const Site& at) {
      return apply_filter("replace", Value::string(s), a, kw, at);
    });
  }
  return Value();
}

Value dict_method(const Value& receiver, const std::string& name) {
  if (name == "items") {
    return Value::function(
        [receiver](const List&, const Dict&, const Site& at) { return Value::of_list(items_of(receiver, at)); });
  }
  if (name == "keys" || name == "values") {
    return Value::function([receiver, name](const List&, const Dict&, const Site& at) {
      List out;
      for (const auto& [k, v] : *receiver.dict) out.push_back(name == "keys" ? Value::string(k) : v);
      at.budget().work(footprint(out), at);
      return Value::of_list(std::move(out));
    });
  }
  if (name == "get") {
    return Value::function([receiver](const List& a, const Dict&, const Site&) {
      const Value* v = !a.empty() && a[0].is(K::kString) ? receiver.find(a[0].s) : nullptr;
      return v != nullptr ? *v : (a.size() > 1 ? a[1] : Value::none());
    });
  }
  return Value();  // a missing key is undefined
}

// The number of items range(b, e, step) makes (step != 0), in unsigned arithmetic: b and e may be anything.
uint64_t range_length(int64_t b, int64_t e, int64_t step) {
  if (step > 0)
    return b < e ? (static_cast<uint64_t>(e) - static_cast<uint64_t>(b) - 1) / static_cast<uint64_t>(step) + 1 : 0;
  return b > e ? (static_cast<uint64_t>(b) - static_cast<uint64_t>(e) - 1) / (0 - static_cast<uint64_t>(step)) + 1 : 0;
}

Value range(const List& a, const Site& at) {
  int64_t b = 0, e = 0, step = 1;
  for (const Value& v : a) {
    if (!v.is(K::kInt)) ORBIT_FAIL(at << ": range needs integers");
  }
  if (a.size() == 1)
    e = a[0].i;
  else if (a.size() >= 2)
    b = a[0].i, e = a[1].i, step = a.size() > 2 ? a[2].i : 1;
  if (step == 0) ORBIT_FAIL(at << ": range step cannot be zero");
  const uint64_t n = range_length(b, e, step);
  if (n > static_cast<uint64_t>(kMaxIterations)) {
    ORBIT_FAIL(at << ": range() of " << n << " items exceeds the limit of " << kMaxIterations);
  }
  at.budget().work(n * sizeof(Value), at);
  List out;
  out.reserve(n);
  for (uint64_t k = 0, x = static_cast<uint64_t>(b); k < n; ++k, x += static_cast<uint64_t>(step)) {
    out.push_back(Value::integer(static_cast<int64_t>(x)));  // in range: b + k * step lies between b and e
  }
  return Value::of_list(std::move(out));
}

}  // namespace

Value method(const Value& receiver, const std::string& name, const Site& at) {
  Value m;
  if (receiver.is(K::kString)) {
    m = string_method(receiver.s, name);
    if (m.is(K::kUndefined) && name == "length") return Value::integer(length_of(receiver, at));
  } else if (receiver.is_mapping()) {
    m = dict_method(receiver, name);
  } else if (receiver.is(K::kList) && name == "length") {
    return Value::integer(static_cast<int64_t>(receiver.list->size()));
  }
  if (m.is(K::kFunction)) m.depth = receiver.depth + 1;  // it holds its receiver
  return m;
}

std::string format_time(const std::string& format, int64_t now) {
  const auto t = static_cast<std::time_t>(now);
  std::tm local{};
  localtime_r(&t, &local);
  char buf[256];
  const std::size_t n = std::strftime(buf, sizeof buf, format.c_str(), &local);
  return std::string(buf, n);
}

namespace {

// Adds strftime_now(fmt)'s call to `reads` (RenderClock). One rendering formats one time, so a format gives one
// text: each is kept once. At most kMaxClockReads formats of at most kMaxClockFormatBytes are kept (bounded memory
// and scans whatever a template calls); past that the reads end with kClockReadsOverflow, which holds at no time.
void record_clock_read(ClockReads& reads, const std::string& fmt, const std::string& text) {
  const auto same = [&](const auto& r) { return r.first == fmt; };
  if (std::any_of(reads.begin(), reads.end(), same)) return;
  if (!reads.empty() && reads.back() == kClockReadsOverflow) return;
  if (reads.size() < kMaxClockReads && fmt.size() <= kMaxClockFormatBytes) {
    reads.emplace_back(fmt, text);
  } else {
    reads.emplace_back(kClockReadsOverflow);
  }
}

}  // namespace

void add_builtin_globals(Dict& globals) {
  globals.emplace_back(
      "raise_exception", Value::function([](const List& a, const Dict&, const Site& at) -> Value {
        ORBIT_FAIL(at << ": the template raised an exception: " << (a.empty() ? std::string() : to_output(a[0], at)));
      }));
  globals.emplace_back("namespace", Value::function([](const List&, const Dict& kw, const Site& at) {
                         std::size_t bytes = 2 * sizeof(Value);
                         for (const auto& [k, v] : kw) bytes += k.size() + footprint(v);
                         at.budget().work(bytes, at);
                         Value ns = Value::of_dict(kw, K::kNamespace);
                         at.state->namespaces.push_back(ns);  // see RenderState
                         return ns;
                       }));
  globals.emplace_back("range",
                       Value::function([](const List& a, const Dict&, const Site& at) { return range(a, at); }));
  globals.emplace_back("strftime_now", Value::function([](const List& a, const Dict&, const Site& at) {
                         const std::string fmt = want_string(a.empty() ? Value() : a[0], "strftime_now", at);
                         std::string text = format_time(fmt, at.state->clock.now);
                         if (at.state->clock.reads != nullptr) record_clock_read(*at.state->clock.reads, fmt, text);
                         return Value::string(std::move(text));
                       }));
}

}  // namespace orbit::runtime::jinja

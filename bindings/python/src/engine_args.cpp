// Engine(...)'s keywords (engine_args.h): the table naming each EngineArgs field after its keyword, reading a
// keyword's value as pybind11 reads an argument of the field's type, and the EngineOptions made of them.
#include "engine_args.h"

#include <array>
#include <string>
#include <type_traits>
#include <variant>

#include "convert.h"

namespace orbit_py {

namespace {

// A field of EngineArgs: its keyword and where it is kept (the type of the member says how a value is read).
struct Field {
  const char* keyword;
  std::variant<int64_t EngineArgs::*, int EngineArgs::*, bool EngineArgs::*, double EngineArgs::*,
               py::str EngineArgs::*, py::object EngineArgs::*>
      member;
};

// In the signature's order.
const std::array<Field, 24> kFields = {{
    {"store_dir", &EngineArgs::store_dir},
    {"pool_bytes", &EngineArgs::pool_bytes},
    {"page_size", &EngineArgs::page_size},
    {"host_budget_bytes", &EngineArgs::host_budget_bytes},
    {"disk_budget_bytes", &EngineArgs::disk_budget_bytes},
    {"threads", &EngineArgs::threads},
    {"remote", &EngineArgs::remote},
    {"remote_ttl_seconds", &EngineArgs::remote_ttl_seconds},
    {"remote_secret", &EngineArgs::remote_secret},
    {"remote_max_held_fraction", &EngineArgs::remote_max_held_fraction},
    {"device", &EngineArgs::device},
    {"dtype", &EngineArgs::dtype},
    {"eviction", &EngineArgs::eviction},
    {"cold_tier", &EngineArgs::cold_tier},
    {"device_tier_bytes", &EngineArgs::device_tier_bytes},
    {"embedding_cache", &EngineArgs::embedding_cache},
    {"background", &EngineArgs::background},
    {"shared_canonicals", &EngineArgs::shared_canonicals},
    {"max_idle_chunks", &EngineArgs::max_idle_chunks},
    {"max_background_bytes", &EngineArgs::max_background_bytes},
    {"constraint_cache", &EngineArgs::constraint_cache},
    {"tokenizer", &EngineArgs::tokenizer},
    {"stored_calibration", &EngineArgs::stored_calibration},
    {"window_past", &EngineArgs::window_past},
}};

// The name pybind11 gives a C++ parameter type in signatures.
template <typename T>
const char* signature_type() {
  if constexpr (std::is_same_v<T, bool>) {
    return "bool";
  } else if constexpr (std::is_integral_v<T>) {
    return "int";
  } else if constexpr (std::is_floating_point_v<T>) {
    return "float";
  } else if constexpr (std::is_same_v<T, py::str>) {
    return "str";
  } else {
    return "object";
  }
}

// A value as it shows in a signature: Python's repr of what pybind11 would make of it.
template <typename T>
std::string signature_default(const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value ? "True" : "False";
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(value);
  } else if constexpr (std::is_floating_point_v<T>) {
    return std::string(py::repr(py::float_(value)));
  } else {
    return std::string(py::repr(value));
  }
}

// `value` read as an argument of type T: a bool strictly (to_bool: True, False or a numpy bool), an int strictly
// (to_int: an int or an object with __index__, not a bool, in the range of T), a float strictly (to_float: a float
// or an int, not a bool), a str from a str only, as pybind11 reads a str argument; a value refused raises TypeError
// naming the keyword.
template <typename T>
T read_value(py::handle value, const char* keyword) {
  const std::string what = std::string("Engine: ") + keyword;
  if constexpr (std::is_same_v<T, bool>) {
    return to_bool(value, what.c_str());
  } else if constexpr (std::is_integral_v<T>) {
    return to_int<T>(value, what.c_str());
  } else if constexpr (std::is_floating_point_v<T>) {
    return to_float(value, what.c_str());
  } else {
    py::detail::make_caster<T> caster;
    if (!caster.load(value, /*convert=*/true)) {
      throw py::type_error(what + ": expected " + signature_type<T>() + ", got " + type_name(value));
    }
    return py::detail::cast_op<T>(std::move(caster));
  }
}

const Field* find_field(const std::string& keyword) {
  for (const Field& f : kFields)
    if (keyword == f.keyword) return &f;
  return nullptr;
}

std::string keyword_list() {
  std::string out;
  for (const Field& f : kFields) out += (out.empty() ? "" : ", ") + std::string(f.keyword);
  return out;
}

// Engine(background=...): a BackgroundMode or its name.
orbit::BackgroundMode background_arg(const py::object& obj) {
  using orbit::BackgroundMode;
  if (py::isinstance<BackgroundMode>(obj)) return to_enum_member<BackgroundMode>(obj, "Engine: background");
  if (py::isinstance<py::str>(obj)) {
    const std::string name = obj.cast<std::string>();
    for (BackgroundMode m : {BackgroundMode::kThread, BackgroundMode::kDeferred, BackgroundMode::kInline}) {
      if (name == orbit::background_mode_name(m)) return m;
    }
    throw py::value_error("Engine: background = " + std::string(py::repr(obj)) +
                          ": expected 'thread', 'deferred' or 'inline' (or a BackgroundMode)");
  }
  throw py::type_error("Engine: background: expected a str or BackgroundMode, got " + type_name(obj));
}

// Engine(constraint_cache=...): a ConstraintCacheOptions, or None for the default.
orbit::ConstraintCacheOptions constraint_cache_arg(const py::object& obj) {
  if (obj.is_none()) return orbit::ConstraintCacheOptions{};
  if (!py::isinstance<orbit::ConstraintCacheOptions>(obj))
    throw py::type_error("Engine: constraint_cache: expected a ConstraintCacheOptions or None, got " + type_name(obj));
  return obj.cast<orbit::ConstraintCacheOptions>();
}

}  // namespace

EngineArgs engine_args(const py::kwargs& kwargs) {
  EngineArgs args;
  for (const auto& [key, value] : kwargs) {
    const std::string keyword = py::str(key);
    const Field* field = find_field(keyword);
    if (field == nullptr) {
      throw py::type_error("Engine: unexpected keyword argument '" + keyword + "' (it takes model and " +
                           keyword_list() + ")");
    }
    std::visit(
        [&](auto member) {
          using T = std::decay_t<decltype(args.*member)>;
          args.*member = read_value<T>(value, field->keyword);
        },
        field->member);
  }
  return args;
}

orbit::EngineOptions engine_options(const py::object& model, const EngineArgs& a) {
  orbit::EngineOptions o;
  // Required: None is a wrong type here, as for any other argument that takes a path and no None.
  if (model.is_none()) throw py::type_error("Engine: model: expected a str or os.PathLike, got None");
  o.model = path_arg(model, "Engine: model");
  o.tokenizer = path_arg(a.tokenizer, "Engine: tokenizer");
  o.store_dir = path_arg(a.store_dir, "Engine: store_dir");
  o.pool_bytes = a.pool_bytes;
  o.page_size = a.page_size;
  o.host_budget_bytes = a.host_budget_bytes;
  o.disk_budget_bytes = a.disk_budget_bytes;
  o.threads = a.threads;
  o.remote = utf8_arg(a.remote, "Engine: remote");
  o.remote_ttl_seconds = a.remote_ttl_seconds;
  o.remote_secret = utf8_arg(a.remote_secret, "Engine: remote_secret");
  o.remote_max_held_fraction = a.remote_max_held_fraction;
  o.device = utf8_arg(a.device, "Engine: device");
  o.dtype = utf8_arg(a.dtype, "Engine: dtype");
  o.eviction = utf8_arg(a.eviction, "Engine: eviction");
  o.cold_tier = utf8_arg(a.cold_tier, "Engine: cold_tier");
  o.device_tier_bytes = a.device_tier_bytes;
  o.embedding_cache = a.embedding_cache;
  o.background = background_arg(a.background);
  o.shared_canonicals = a.shared_canonicals;
  o.max_idle_chunks = a.max_idle_chunks;
  o.max_background_bytes = a.max_background_bytes;
  o.stored_calibration = a.stored_calibration;
  o.window_past = a.window_past;
  if (!a.constraint_cache.is_none()) o.constraint_cache = constraint_cache_arg(a.constraint_cache);
  // The SDK reads "" as the default: an empty value (a configuration left blank) is said, not taken for it.
  const EngineArgs defaults;
  const struct {
    const char* keyword;
    bool empty;
    std::string left_out;
  } blanks[] = {{"tokenizer", !a.tokenizer.is_none() && o.tokenizer.empty(), "None"},
                {"store_dir", !a.store_dir.is_none() && o.store_dir.empty(), "None"},
                {"device", o.device.empty(), py::repr(defaults.device)},
                {"dtype", o.dtype.empty(), py::repr(defaults.dtype)},
                {"eviction", o.eviction.empty(), py::repr(defaults.eviction)},
                {"cold_tier", o.cold_tier.empty(), py::repr(defaults.cold_tier)}};
  for (const auto& b : blanks) {
    if (b.empty) {
      throw py::value_error(std::string("Engine: ") + b.keyword + " is empty (leave it out for the default, " +
                            b.left_out + ")");
    }
  }
  return o;
}

std::string engine_signature(const std::string& self_type) {
  const EngineArgs defaults;
  std::string out = "__init__(self: " + self_type + ", model: object, *";
  for (const Field& f : kFields) {
    std::visit(
        [&](auto member) {
          using T = std::decay_t<decltype(defaults.*member)>;
          out +=
              std::string(", ") + f.keyword + ": " + signature_type<T>() + " = " + signature_default(defaults.*member);
        },
        f.member);
  }
  return out + ") -> None";
}

}  // namespace orbit_py

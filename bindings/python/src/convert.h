// Conversions between Python objects and the SDK's argument types, shared by the bind_*.cpp files.
//
//   tokens      list/tuple of ints, 1-D integer numpy array or torch tensor    -> std::vector<int64_t>
//   embeddings  [n, hidden] float32/float16/bfloat16 numpy array or torch tensor -> orbit::TensorView
//   grid        [3, n] or [n] integer numpy array, torch tensor or nested list   -> orbit::TensorView (int64)
//   instance    int id or InstanceInfo                                          -> orbit::InstanceId
//
// A Borrowed keeps the Python objects a TensorView points into alive for one call: CPU C-contiguous
// arrays and tensors are borrowed without a copy; anything else is copied once into a contiguous array.
// Bad input raises TypeError (wrong type or dtype) or ValueError (wrong shape) naming the argument; a bool
// element of a list or tuple (True, numpy.bool_(True), numpy.array(True): numpy would read each as 1)
// TypeError naming its index ("detokenize: tokens[0]: expected int, got bool"), as a bool numpy array or tensor
// is refused by its dtype, and an int element out of int64 ValueError naming its index. numpy's integer scalars
// are taken among the elements as ints are (numpy.asarray alone read [numpy.uint64(5), 2] as float64).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "initialized.h"
#include "orbit/common/shape.h"
#include "orbit/engine.h"

namespace orbit_py {

namespace py = pybind11;

// A TensorView plus the Python object(s) its memory belongs to.
struct Borrowed {
  orbit::TensorView view;
  py::object owner;     // the array/tensor the view points into (kept alive while the view is used)
  bool copied = false;  // true when the input had to be copied (non-contiguous, on a device, a list)
};

bool is_torch_tensor(py::handle obj);
// The Python type name of `obj` for messages ("float", "ndarray").
std::string type_name(py::handle obj);

// `what` names the argument in error messages ("add_embeddings: embeddings").
std::vector<int64_t> to_tokens(py::handle obj, const char* what);
Borrowed to_embeddings(py::handle obj, const char* what);
Borrowed to_grid(py::handle obj, const char* what);
// An int or an object __index__ makes one (numpy's integer scalars, e.g. np.argmax's), not a bool.
bool is_integer(py::handle obj);
orbit::InstanceId to_instance(py::handle obj, const char* what);
// A bool argument read strictly: True, False or a numpy bool; anything else (None, 0/1, 1.5, a str, which
// pybind11's bool read through __bool__) raises TypeError naming `what` and the type ("Engine:
// embedding_cache: expected bool, got float").
bool to_bool(py::handle obj, const char* what);

// A bool parameter of a bound function, read by the function with BoolArg::get (to_bool: strict, naming the
// argument): its caster takes any object and writes "bool" in the signature pybind11 generates, where a
// plain `bool` parameter would take anything with __bool__ and refuse others without naming the argument.
struct BoolArg {
  static constexpr auto kPythonType = py::detail::const_name("bool");
  py::object value;
  bool get(const char* what) const { return to_bool(value, what); }
};
// An int argument read strictly: an int or an object __index__ makes one (numpy's integer scalars), in [lo, hi].
// A bool (True, False, a numpy bool), which pybind11's int read as 1 or 0, or another type raises TypeError
// naming `what` and the type, in the form of to_bool's ("generate: max_tokens: expected int, got bool"); an int
// out of [lo, hi] TypeError naming the range ("Engine: threads: expected int in [-2147483648, 2147483647],
// got 1099511627776", as pybind11 refused it, without naming it).
int64_t to_int(py::handle obj, const char* what, int64_t lo = std::numeric_limits<int64_t>::min(),
               int64_t hi = std::numeric_limits<int64_t>::max());
template <typename T>
T to_int(py::handle obj, const char* what) {
  static_assert(std::is_integral_v<T> && std::is_signed_v<T> && !std::is_same_v<T, bool>);
  return static_cast<T>(to_int(obj, what, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
}

// An int parameter of a bound function, read by the function with IntArg::get (to_int: strict, naming the
// argument), as BoolArg is for bools: its caster takes any object and writes "int" in the signature.
struct IntArg {
  static constexpr auto kPythonType = py::detail::const_name("int");
  py::object value;
  template <typename T = int64_t>
  T get(const char* what) const {
    return to_int<T>(value, what);
  }
};
// A str parameter of a bound function, read by the function with StrArg::get, as BoolArg is for bools: its caster
// takes any object and writes "str" in the signature, where a py::str parameter refused None or a list with
// pybind11's "incompatible function arguments", naming no argument. get() raises TypeError naming `what` and the
// type ("tokenize: text: expected str, got None"), and reads a str as utf8_arg does.
struct StrArg {
  static constexpr auto kPythonType = py::detail::const_name("str");
  py::object value;
  std::string get(const std::string& what) const;
};
// A float argument read strictly: a float, an int or an object __float__ makes one (numpy's float scalars), not a
// bool (True, False, a numpy bool), which pybind11's float read as 1.0 or 0.0; another type (None, a str)
// raises TypeError naming `what` and the type, in the form of to_bool's ("generate: temperature: expected float,
// got None"); an int too large for a double ValueError naming it. The range is the caller's to check.
double to_float(py::handle obj, const char* what);
// A float parameter of a bound function, read by the function with FloatArg::get (to_float), as BoolArg is for
// bools: its caster takes any object and writes "float" in the signature, where a `double` parameter refused None
// or a str with pybind11's "incompatible function arguments", naming no argument.
struct FloatArg {
  static constexpr auto kPythonType = py::detail::const_name("float");
  py::object value;
  double get(const char* what) const { return to_float(value, what); }
};
// A sampling seed: an int (or an object with __index__, not a bool) in [0, 2**64); another type raises
// TypeError ("generate: seed: expected int, got float"), an int out of that range ValueError ("generate: seed =
// -1 is out of range: expected int in [0, 2**64)"), both naming `what`.
uint64_t to_seed(py::handle obj, const char* what);
std::vector<orbit::InstanceId> to_instances(py::handle obj, const char* what);
// An instance of a bound enum (py::isinstance<E>(obj) already checked) that is one of its members: pybind11's
// enums take any int (MissAction(99)), which C++ would otherwise receive as an enumerator it does not have.
// ValueError naming `what` ("WindowPolicy.on_miss") and the valid members otherwise.
void check_enum_member(py::handle obj, const char* what);
template <typename E>
E to_enum_member(py::handle obj, const char* what) {
  check_enum_member(obj, what);
  return obj.cast<E>();
}
// A parameter of a bound class or enum T (Window.apply's Plan, Plan.count's StepAction), read by the function with
// TypedArg::get, as BoolArg is for bools: its caster takes any object and writes T's Python name in the signature,
// where a `const T&` parameter refused None or another type with pybind11's "incompatible function arguments",
// naming no argument. get() raises TypeError naming `what` and both types ("apply: plan: expected Plan, got
// None"), ValueError for an enum's value that is none of its members (check_enum_member); a class is returned by
// reference into the Python object, which the caller's argument keeps alive.
template <typename T>
struct TypedArg {
  static constexpr auto kPythonType = py::detail::make_caster<T>::name;
  py::object value;
  decltype(auto) get(const char* what) const {
    if (!py::isinstance<T>(value)) {
      throw py::type_error(std::string(what) + ": expected " +
                           std::string(py::str(py::type::of<T>().attr("__name__"))) + ", got " +
                           (value.is_none() ? "None" : type_name(value)));
    }
    if constexpr (std::is_enum_v<T>) {
      check_enum_member(value, what);
      return value.cast<T>();
    } else {
      return value.cast<const T&>();
    }
  }
};

// Moves a vector into a numpy array without copying (the array owns it).
template <typename T>
py::array_t<T> to_numpy(std::vector<T>&& values, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  py::capsule free_when_done(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, owned->data(), free_when_done);
}

// Model text as a str: UTF-8, where bytes that are not (a character cut by max_tokens, a byte token out of
// place) become U+FFFD instead of raising UnicodeDecodeError.
py::str utf8_text(const std::string& text);

// A str argument as UTF-8 (`text` must be a str). One holding a lone surrogate, which UTF-8 cannot encode,
// raises ValueError naming `what` (pybind11's own conversion raised "Unable to cast Python instance").
std::string utf8_arg(py::handle text, const std::string& what);

// A path argument (str, bytes or os.PathLike; None gives "") as the file system's bytes, as os.fsencode gives
// them: a str os.listdir made from a name that is not UTF-8 names the same file. Another type raises TypeError
// naming `what`; a path holding a NUL raises ValueError naming it (checked by fs_path).
std::string path_arg(const py::object& obj, const char* what);

// `path` (the file system's bytes) when it holds no NUL, else ValueError naming `what` ("embedded null byte",
// as open() says): the C calls would read the path only up to it, and open or write another file.
std::string fs_path(std::string path, const char* what);

// Python's json module (for dicts passed as their JSON text, and JSON text returned as dicts).
py::object json_module();

// A dict or list passed for JSON (a trace, a schema, tools, a call's arguments) as its JSON text. numpy's
// scalars are written as the values they equal (numpy.int64(3) as 3, numpy.float32(0.5) as 0.5, numpy.bool_ as
// true/false), a numpy array of bools, ints or floats as a list; a value JSON cannot hold exactly raises naming
// its path under `what`: a float not finite ValueError ("replay: trace['steps'][3]['p']: nan is not a JSON
// number"), another type TypeError ("...['tokens']: expected a JSON value (...), got complex128"), as does a
// dict key json.dumps refuses.
std::string json_text(py::handle obj, const std::string& what);

// "[1, 2, 3]" for messages.
using orbit::shape_string;

}  // namespace orbit_py

namespace pybind11::detail {

// BoolArg, IntArg, FloatArg, StrArg and TypedArg: any object, checked by the function that names the argument (see
// BoolArg); the signature pybind11 generates writes Arg::kPythonType for it.
template <typename Arg>
struct object_arg_caster {
  PYBIND11_TYPE_CASTER(Arg, Arg::kPythonType);
  bool load(handle src, bool /*convert*/) {
    if (!src) return false;
    value.value = reinterpret_borrow<object>(src);
    return true;
  }
  static handle cast(const Arg& arg, return_value_policy, handle) { return arg.value.inc_ref(); }
};

template <>
struct type_caster<orbit_py::BoolArg> : object_arg_caster<orbit_py::BoolArg> {};
template <>
struct type_caster<orbit_py::IntArg> : object_arg_caster<orbit_py::IntArg> {};
template <>
struct type_caster<orbit_py::StrArg> : object_arg_caster<orbit_py::StrArg> {};
template <>
struct type_caster<orbit_py::FloatArg> : object_arg_caster<orbit_py::FloatArg> {};
template <typename T>
struct type_caster<orbit_py::TypedArg<T>> : object_arg_caster<orbit_py::TypedArg<T>> {};

}  // namespace pybind11::detail

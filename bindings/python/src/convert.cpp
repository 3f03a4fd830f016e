#include "convert.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace orbit_py {

std::string type_name(py::handle obj) { return py::str(py::type::handle_of(obj).attr("__qualname__")); }

namespace {

// numpy's bool scalar: numpy.bool_ (numpy 1.x), numpy.bool (2.x); what pybind11's bool takes unconverted.
bool is_numpy_bool(py::handle obj) {
  const std::string type = Py_TYPE(obj.ptr())->tp_name;
  return type == "numpy.bool_" || type == "numpy.bool";
}

}  // namespace

bool to_bool(py::handle obj, const char* what) {
  if (obj.ptr() == Py_True) return true;
  if (obj.ptr() == Py_False) return false;
  if (is_numpy_bool(obj)) return PyObject_IsTrue(obj.ptr()) == 1;
  throw py::type_error(std::string(what) + ": expected bool, got " + (obj.is_none() ? "None" : type_name(obj)));
}

void check_enum_member(py::handle obj, const char* what) {
  const py::dict members = py::type::handle_of(obj).attr("__members__");
  const py::object value = obj.attr("value");
  std::string valid;
  for (auto item : members) {
    if (value.equal(item.second.attr("value"))) return;
    valid += (valid.empty() ? "" : ", ") + std::string(py::str(item.first));
  }
  throw py::value_error(std::string(what) + ": " + std::string(py::str(value)) + " is not a member of " +
                        type_name(obj) + " (valid: " + valid + ")");
}

namespace {

// numpy.array(True): a 0-d bool array, an int argument's bool as much as numpy.bool_(True) is.
bool is_numpy_bool_array(py::handle obj) {
  if (!py::isinstance<py::array>(obj)) return false;
  const auto a = py::reinterpret_borrow<py::array>(obj);
  return a.ndim() == 0 && py::str(a.dtype().attr("kind")).cast<std::string>() == "b";
}

// "<what>: expected int, got <type>" (TypeError), as to_bool words its refusal.
py::type_error not_an_int(py::handle obj, const char* what) {
  return py::type_error(std::string(what) + ": expected int, got " +
                        (obj.is_none()                                    ? "None"
                         : is_numpy_bool(obj) || is_numpy_bool_array(obj) ? "bool"
                                                                          : type_name(obj)));
}

}  // namespace

int64_t to_int(py::handle obj, const char* what, int64_t lo, int64_t hi) {
  if (!is_integer(obj)) throw not_an_int(obj, what);
  const py::object value = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));  // numpy.int64(3) -> 3
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow != 0 || v < lo || v > hi) {
    throw py::type_error(std::string(what) + ": expected int in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                         "], got " + std::string(py::repr(value)));
  }
  return v;
}

double to_float(py::handle obj, const char* what) {
  const bool boolean = PyBool_Check(obj.ptr()) || is_numpy_bool(obj) || is_numpy_bool_array(obj);
  if (!boolean) {
    const double value = PyFloat_AsDouble(obj.ptr());  // a float, or what __float__ (else __index__) gives
    if (!(value == -1.0 && PyErr_Occurred())) return value;
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
      PyErr_Clear();
      throw py::value_error(std::string(what) + " = " + std::string(py::repr(obj)) + " is out of the float range");
    }
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw py::error_already_set();
    PyErr_Clear();
  }
  throw py::type_error(std::string(what) + ": expected float, got " +
                       (obj.is_none() ? "None"
                        : boolean     ? "bool"
                                      : type_name(obj)));
}

uint64_t to_seed(py::handle obj, const char* what) {
  if (!is_integer(obj)) throw not_an_int(obj, what);
  const py::int_ value = py::reinterpret_steal<py::int_>(PyNumber_Index(obj.ptr()));  // an int, or what __index__ gives
  const unsigned long long seed = PyLong_AsUnsignedLongLong(value.ptr());  // raises OverflowError out of range
  if (PyErr_Occurred()) {
    PyErr_Clear();
    throw py::value_error(std::string(what) + " = " + py::str(static_cast<py::handle>(value)).cast<std::string>() +
                          " is out of range: expected int in [0, 2**64)");
  }
  return seed;
}

namespace {

py::module_ numpy() { return py::module_::import("numpy"); }

// Element kind of a numpy dtype: 'i', 'u', 'f', 'b', 'c', 'U', 'O', ...
char dtype_kind(const py::array& a) { return py::str(a.dtype().attr("kind")).cast<std::string>()[0]; }
std::string dtype_str(const py::array& a) { return py::str(a.dtype()); }

std::vector<int64_t> shape_of(const py::array& a) {
  std::vector<int64_t> s;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s.push_back(static_cast<int64_t>(a.shape(i)));
  return s;
}

// torch dtype name without the "torch." prefix ("float32", "bfloat16", "int64", ...).
std::string torch_dtype(py::handle tensor) {
  std::string s = py::str(tensor.attr("dtype"));
  return s.rfind("torch.", 0) == 0 ? s.substr(6) : s;
}

// Refuses a torch tensor that holds no data to read: a sparse one (its layout not torch.strided) or one on the
// meta device (torch's own errors there name neither the call nor the argument).
void check_torch_data(py::handle tensor, const std::string& what) {
  const std::string layout = py::str(tensor.attr("layout")).cast<std::string>();
  if (layout != "torch.strided") {
    throw py::type_error(what + ": a torch tensor of layout " + layout + "; pass a dense one (tensor.to_dense())");
  }
  if (py::str(tensor.attr("device").attr("type")).cast<std::string>() == "meta") {
    throw py::value_error(what + ": a torch tensor on the meta device holds no data");
  }
}

// A torch tensor of integer dtype as an int64 numpy array (CPU, contiguous; copies only when needed).
py::array torch_integers_to_numpy(py::handle tensor, const char* what) {
  check_torch_data(tensor, what);
  const std::string dt = torch_dtype(tensor);
  if (dt != "int64" && dt != "int32" && dt != "int16" && dt != "int8" && dt != "uint8") {
    throw py::type_error(std::string(what) + ": torch dtype " + dt + "; expected an integer tensor (e.g. torch.int64)");
  }
  py::object t = tensor.attr("detach")().attr("cpu")();
  if (dt != "int64") t = t.attr("long")();
  return t.attr("contiguous")().attr("numpy")();
}

// A bool among a sequence's elements: Python's, numpy's scalar, or a numpy array or torch tensor of bools (a 0-d
// one, numpy.array(True), included), which numpy.asarray([numpy.array(True), 2]) reads as 1.
bool bool_element(py::handle obj) {
  if (PyBool_Check(obj.ptr()) || is_numpy_bool(obj)) return true;
  if (py::isinstance<py::array>(obj)) return dtype_kind(py::reinterpret_borrow<py::array>(obj)) == 'b';
  return is_torch_tensor(obj) && torch_dtype(obj) == "bool";
}

// `map(element, index)` over a list or tuple's elements: `sequence` itself when it returned each element as it
// was (and `always_copy` is false), else a list of what it returned. The list is made only from the first
// element that changed.
template <typename Map>
py::object map_elements(py::handle sequence, bool always_copy, const Map& map) {
  const py::ssize_t n = PySequence_Fast_GET_SIZE(sequence.ptr());
  PyObject** item = PySequence_Fast_ITEMS(sequence.ptr());
  py::list out;
  bool copying = always_copy;
  for (py::ssize_t i = 0; i < n; ++i) {
    py::object value = map(py::handle(item[i]), i);
    if (!copying && value.ptr() != item[i]) {
      for (py::ssize_t j = 0; j < i; ++j) out.append(py::handle(item[j]));
      copying = true;
    }
    if (copying) out.append(std::move(value));
  }
  return copying ? py::object(std::move(out)) : py::reinterpret_borrow<py::object>(sequence);
}

// A list or tuple's elements, nested lists and tuples included, as numpy.asarray should read them: an int out
// of int64 raises ValueError and a bool TypeError, both naming its index ("detokenize: tokens[1]: expected
// int, got bool"); numpy's integer scalars and 0-d integer arrays become ints (numpy.asarray([numpy.uint64(5),
// 2]) is float64). Returns `sequence` itself when nothing changed (one pointer test and a range check per
// int), else a list. What numpy reads as floats or text is left for the dtype check to refuse.
py::object checked_ints(py::handle sequence, const std::string& what) {
  return map_elements(sequence, false, [&](py::handle item, py::ssize_t i) -> py::object {
    const auto at = [&] { return what + "[" + std::to_string(i) + "]"; };
    if (PyLong_CheckExact(item.ptr())) {
      int overflow = 0;
      PyLong_AsLongLongAndOverflow(item.ptr(), &overflow);
      if (overflow != 0) {
        throw py::value_error(at() + ": " + std::string(py::repr(item)) +
                              (overflow > 0 ? " is past the largest" : " is below the smallest") +
                              " int64 (token ids and positions are int64)");
      }
    } else if (bool_element(item)) {
      const bool scalar = !py::hasattr(item, "ndim") || item.attr("ndim").cast<int>() == 0;
      if (!scalar) throw py::type_error(at() + ": dtype bool; expected integers (token ids / positions)");
      throw py::type_error(at() + ": expected int, got bool");
    } else if (PyList_Check(item.ptr()) || PyTuple_Check(item.ptr())) {
      return checked_ints(item, at());
    } else if (is_integer(item) && (!py::hasattr(item, "ndim") || item.attr("ndim").cast<int>() == 0)) {
      return py::reinterpret_steal<py::object>(PyNumber_Index(item.ptr()));  // numpy.int64(3) -> 3
    }
    return py::reinterpret_borrow<py::object>(item);
  });
}

// Integer data (numpy array, torch tensor or nested sequence) as a C-contiguous int64 numpy array.
py::array integer_array(py::handle obj, const char* what) {
  py::array a;
  if (is_torch_tensor(obj)) {
    a = torch_integers_to_numpy(obj, what);
  } else if (py::isinstance<py::array>(obj)) {
    a = py::reinterpret_borrow<py::array>(obj);
  } else if (py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj) || !py::isinstance<py::sequence>(obj)) {
    throw py::type_error(std::string(what) + ": expected a sequence of ints, a numpy array or a torch tensor, got " +
                         type_name(obj));
  } else {
    // A list or tuple as it is, another sequence (range, array.array) as a list; one that cannot be listed
    // is left for numpy.asarray to refuse.
    const py::object items = py::reinterpret_steal<py::object>(PySequence_Fast(obj.ptr(), "not a sequence"));
    if (!items) PyErr_Clear();
    const py::object ints = items ? checked_ints(items, what) : py::reinterpret_borrow<py::object>(obj);
    try {
      a = numpy().attr("asarray")(ints.ptr() == items.ptr() ? obj : py::handle(ints));
    } catch (py::error_already_set& e) {
      throw py::value_error(std::string(what) + ": not a rectangular sequence of ints (" + e.what() + ")");
    }
    if (a.size() == 0) return numpy().attr("zeros")(py::make_tuple(0), "int64");
  }
  // numpy.ascontiguousarray below would read a 0-d array (numpy.array(5), torch.tensor(5)) as [5].
  if (a.ndim() == 0) {
    throw py::value_error(std::string(what) + ": a 0-d array (one value); expected a 1-D one (wrap it: [5], not 5)");
  }
  const char kind = dtype_kind(a);
  if (a.size() > 0 && kind != 'i' && kind != 'u') {
    throw py::type_error(std::string(what) + ": dtype " + dtype_str(a) + "; expected integers (token ids / positions)");
  }
  // Unsigned values past int64 would wrap to negative numbers in the cast below.
  if (a.size() > 0 && kind == 'u' && a.attr("max")().cast<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    throw py::value_error(std::string(what) + ": " + std::string(py::str(a.attr("max")())) +
                          " is past the largest int64 (token ids and positions are int64)");
  }
  return numpy().attr("ascontiguousarray")(a, "int64");
}

}  // namespace

bool is_torch_tensor(py::handle obj) {
  // Avoid importing torch: a tensor's type lives in the torch module and has data_ptr().
  const py::handle type = py::type::handle_of(obj);
  if (!py::hasattr(type, "__module__")) return false;
  const std::string module = py::str(type.attr("__module__"));
  return (module == "torch" || module.rfind("torch.", 0) == 0) && py::hasattr(obj, "data_ptr") &&
         py::hasattr(obj, "is_contiguous");
}

std::vector<int64_t> to_tokens(py::handle obj, const char* what) {
  const py::array a = integer_array(obj, what);
  if (a.ndim() != 1) {
    throw py::value_error(std::string(what) + ": shape " + shape_string(shape_of(a)) + "; token ids must be 1-D");
  }
  const auto* p = static_cast<const int64_t*>(a.data());
  return std::vector<int64_t>(p, p + a.size());
}

namespace {

// An embeddings dtype by the name numpy and torch (less its "torch.") give it: float32, bfloat16 (torch's, or
// ml_dtypes' for numpy) or float16. Another raises TypeError naming `what`, the dtype and `how` to convert.
orbit::DType embedding_dtype(const std::string& name, const char* what, const char* kind, const char* how) {
  if (name == "float32") return orbit::DType::kFloat32;
  if (name == "bfloat16") return orbit::DType::kBFloat16;
  if (name == "float16") return orbit::DType::kFloat16;
  throw py::type_error(std::string(what) + ": " + kind + " " + name +
                       "; embeddings must be float32, bfloat16 or float16 (e.g. " + how + ")");
}

void check_embedding_shape(const std::vector<int64_t>& shape, const char* what) {
  if (shape.size() != 2) {
    throw py::value_error(std::string(what) + ": shape " + shape_string(shape) + "; embeddings must be [n, hidden]");
  }
}

// A torch tensor's rows: borrowed when on the CPU and contiguous, else copied there.
Borrowed torch_embeddings(py::handle tensor, const char* what) {
  Borrowed b;
  check_torch_data(tensor, what);
  py::object t = tensor.attr("detach")();
  b.view.dtype = embedding_dtype(torch_dtype(t), what, "torch dtype", "tensor.float()");
  for (py::handle d : t.attr("shape")) b.view.shape.push_back(d.cast<int64_t>());
  check_embedding_shape(b.view.shape, what);
  if (py::str(t.attr("device").attr("type")).cast<std::string>() != "cpu") {
    t = t.attr("cpu")();
    b.copied = true;
  }
  if (!t.attr("is_contiguous")().cast<bool>()) {
    t = t.attr("contiguous")();
    b.copied = true;
  }
  b.view.data = reinterpret_cast<const void*>(t.attr("data_ptr")().cast<uintptr_t>());
  b.owner = t;
  return b;
}

// A bool among a list or tuple's elements, nested lists and tuples included, which numpy.asarray(..., "float32")
// would read as 1.0 or 0.0: a TypeError naming its index ("add_embeddings: embeddings[0][1]: expected a number,
// got bool"; a bool array element "dtype bool"). Floats, ints and other arrays are left for numpy to read.
void refuse_bools(py::handle sequence, const std::string& what) {
  const py::ssize_t n = PySequence_Fast_GET_SIZE(sequence.ptr());
  PyObject** item = PySequence_Fast_ITEMS(sequence.ptr());
  for (py::ssize_t i = 0; i < n; ++i) {
    const py::handle element(item[i]);
    if (PyFloat_CheckExact(item[i]) || PyLong_CheckExact(item[i])) continue;
    const auto at = [&] { return what + "[" + std::to_string(i) + "]"; };
    if (PyList_Check(item[i]) || PyTuple_Check(item[i])) {
      refuse_bools(element, at());
    } else if (bool_element(element)) {
      const bool scalar = !py::hasattr(element, "ndim") || element.attr("ndim").cast<int>() == 0;
      if (!scalar) throw py::type_error(at() + ": dtype bool; embeddings must be float32, bfloat16 or float16");
      throw py::type_error(at() + ": expected a number, got bool");
    }
  }
}

// A numpy array's rows (nested lists of numbers read as float32): borrowed when native and C-contiguous.
Borrowed numpy_embeddings(py::handle obj, const char* what) {
  Borrowed b;
  py::array a;
  if (py::isinstance<py::array>(obj)) {
    a = py::reinterpret_borrow<py::array>(obj);
  } else if (py::isinstance<py::sequence>(obj) && !py::isinstance<py::str>(obj)) {
    const py::object items = py::reinterpret_steal<py::object>(PySequence_Fast(obj.ptr(), "not a sequence"));
    if (!items) PyErr_Clear();  // left for numpy.asarray to refuse
    if (items) refuse_bools(items, what);
    try {
      a = numpy().attr("asarray")(obj, "float32");  // nested lists of numbers: converted to float32
    } catch (py::error_already_set& e) {
      throw py::type_error(std::string(what) + ": not a rectangular array of numbers (" + e.what() + ")");
    }
    b.copied = true;
  } else {
    throw py::type_error(std::string(what) + ": expected a numpy array or a torch tensor of shape [n, hidden], got " +
                         type_name(obj));
  }
  b.view.dtype = embedding_dtype(dtype_str(a), what, "dtype", "array.astype(numpy.float32)");
  b.view.shape = shape_of(a);
  check_embedding_shape(b.view.shape, what);
  if (!a.dtype().attr("isnative").cast<bool>()) {
    a = a.attr("astype")(a.dtype().attr("newbyteorder")("="));
    b.copied = true;
  }
  if (!(a.flags() & py::array::c_style)) {
    a = numpy().attr("ascontiguousarray")(a);
    b.copied = true;
  }
  b.view.data = a.data();
  b.owner = a;
  return b;
}

}  // namespace

Borrowed to_embeddings(py::handle obj, const char* what) {
  Borrowed b = is_torch_tensor(obj) ? torch_embeddings(obj, what) : numpy_embeddings(obj, what);
  if (b.view.shape[0] < 1) {
    throw py::value_error(std::string(what) + ": shape " + shape_string(b.view.shape) + " has no rows");
  }
  return b;
}

Borrowed to_grid(py::handle obj, const char* what) {
  Borrowed b;
  if (obj.is_none()) return b;
  const py::array a = integer_array(obj, what);
  const std::vector<int64_t> shape = shape_of(a);
  if (shape.size() != 1 && shape.size() != 2) {
    throw py::value_error(std::string(what) + ": shape " + shape_string(shape) + "; a grid must be [3, n] or [n]");
  }
  b.view.data = a.data();
  b.view.dtype = orbit::DType::kInt64;
  b.view.shape = shape;
  b.owner = a;
  b.copied = true;
  return b;
}

bool is_integer(py::handle obj) {
  if (py::isinstance<py::bool_>(obj) || is_numpy_bool(obj)) return false;  // numpy's bool has __index__
  if (py::isinstance<py::int_>(obj)) return true;
  if (!PyIndex_Check(obj.ptr())) return false;
  // numpy's integer scalars and 0-d integer arrays; a 1-d array has __index__ too, and refuses it.
  PyObject* index = PyNumber_Index(obj.ptr());
  if (index == nullptr) {
    PyErr_Clear();
    return false;
  }
  Py_DECREF(index);
  return true;
}

orbit::InstanceId to_instance(py::handle obj_in, const char* what) {
  if (py::isinstance<orbit::InstanceInfo>(obj_in)) return obj_in.cast<const orbit::InstanceInfo&>().id;
  if (!is_integer(obj_in)) {
    throw py::type_error(std::string(what) + ": expected an instance id (int) or an InstanceInfo, got " +
                         type_name(obj_in));
  }
  const py::object obj = py::reinterpret_steal<py::object>(PyNumber_Index(obj_in.ptr()));  // numpy.int64(3) -> 3
  if (PyObject_RichCompareBool(obj.ptr(), py::int_(0).ptr(), Py_LT) == 1) {
    throw py::value_error(std::string(what) + ": instance id " + std::string(py::repr(obj)) + " is negative");
  }
  try {
    return obj.cast<orbit::InstanceId>();
  } catch (const py::cast_error&) {
    throw py::value_error(std::string(what) + ": instance id " + std::string(py::repr(obj)) +
                          " is past the largest instance id");
  }
}

std::vector<orbit::InstanceId> to_instances(py::handle obj, const char* what) {
  if (py::isinstance<py::str>(obj) || !py::isinstance<py::iterable>(obj)) {
    throw py::type_error(std::string(what) + ": expected a sequence of instance ids or InstanceInfo, got " +
                         type_name(obj));
  }
  std::vector<orbit::InstanceId> out;
  for (py::handle item : obj) out.push_back(to_instance(item, what));
  return out;
}

py::str utf8_text(const std::string& text) {
  PyObject* decoded = PyUnicode_DecodeUTF8(text.data(), static_cast<py::ssize_t>(text.size()), "replace");
  if (decoded == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(decoded);
}

std::string utf8_arg(py::handle text, const std::string& what) {
  py::ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(text.ptr(), &size);
  if (data == nullptr) {
    const py::error_already_set error;  // UnicodeEncodeError: a lone surrogate such as '\udcff'
    throw py::value_error(what + " is not valid text: " + std::string(py::str(error.value())) +
                          " (a str from bytes decoded with errors='surrogateescape' or 'surrogatepass' holds such "
                          "characters; decode with errors='replace')");
  }
  return std::string(data, static_cast<std::size_t>(size));
}

std::string StrArg::get(const std::string& what) const {
  if (!py::isinstance<py::str>(value)) {
    throw py::type_error(what + ": expected str, got " + (value.is_none() ? "None" : type_name(value)));
  }
  return utf8_arg(value, what);
}

std::string path_arg(const py::object& obj, const char* what) {
  if (obj.is_none()) return "";
  py::object path;
  try {
    path = py::module_::import("os").attr("fspath")(obj);
  } catch (py::error_already_set&) {
    throw py::type_error(std::string(what) + ": expected a str or os.PathLike, got " +
                         std::string(py::str(py::type::handle_of(obj).attr("__qualname__"))));
  }
  // The file system's bytes, as open() would use them: a bytes path as given (str() of it read "b'...'", a path
  // that never exists), a str one encoded as os.fsencode does (names os.listdir gave, undecodable bytes
  // included, name the same files).
  return fs_path(py::module_::import("os").attr("fsencode")(path).cast<std::string>(), what);
}

std::string fs_path(std::string path, const char* what) {
  const std::size_t nul = path.find('\0');
  if (nul != std::string::npos) {
    throw py::value_error(std::string(what) + ": embedded null byte at index " + std::to_string(nul) +
                          " (a path ends at the first NUL: the part before it would name another file)");
  }
  return path;
}

py::object json_module() { return py::module_::import("json"); }

namespace {

// Nesting past this is refused (json.dumps would raise RecursionError).
constexpr std::size_t kMaxJsonDepth = 500;

// The dicts, lists and tuples json_ready is inside of, outermost first: one met again is a circular reference.
using OpenContainers = std::vector<PyObject*>;

py::object json_ready(py::handle obj, const std::string& path, OpenContainers& open);

// numpy's scalars as the Python values they equal exactly: a bool, an int (any width), a float (float16/32
// widen exactly); nullptr for another type.
py::object numpy_scalar_value(py::handle obj) {
  if (is_numpy_bool(obj)) return py::bool_(PyObject_IsTrue(obj.ptr()) == 1);
  const py::handle type = py::type::handle_of(obj);
  if (!py::hasattr(type, "__module__") || std::string(py::str(type.attr("__module__"))) != "numpy") return {};
  if (is_integer(obj)) return py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (py::isinstance(obj, numpy().attr("floating"))) return py::float_(obj.cast<double>());
  return {};
}

// A dict key as json.dumps takes it (str, int, float, bool, None; a numpy scalar as its value).
py::object json_key(py::handle key, const std::string& path) {
  if (PyUnicode_Check(key.ptr()) || PyLong_Check(key.ptr()) || PyFloat_Check(key.ptr()) || key.is_none()) {
    return py::reinterpret_borrow<py::object>(key);
  }
  if (py::object value = numpy_scalar_value(key)) return value;
  throw py::type_error(path + ": key " + std::string(py::repr(key)) +
                       ": expected a str, int, float, bool or None, got " + type_name(key));
}

py::object json_ready_dict(py::handle obj, const std::string& path, OpenContainers& open) {
  py::dict out;
  bool changed = false;
  for (auto [key, value] : py::reinterpret_borrow<py::dict>(obj)) {
    const py::object k = json_key(key, path);
    const py::object v = json_ready(value, path + "[" + std::string(py::repr(k)) + "]", open);
    changed = changed || k.ptr() != key.ptr() || v.ptr() != value.ptr();
    out[k] = v;
  }
  return changed ? py::object(out) : py::reinterpret_borrow<py::object>(obj);
}

// A dict, list or tuple's values made ready (a tuple as a list), refused where it holds itself or nests too deep.
py::object json_ready_container(py::handle obj, const std::string& path, OpenContainers& open) {
  if (std::find(open.begin(), open.end(), obj.ptr()) != open.end()) {
    throw py::value_error(path + ": a circular reference (it holds a " + type_name(obj) + " that holds it)");
  }
  if (open.size() == kMaxJsonDepth) {
    throw py::value_error(path + ": nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  open.push_back(obj.ptr());
  py::object out = PyDict_Check(obj.ptr())
                       ? json_ready_dict(obj, path, open)
                       : map_elements(obj, PyTuple_Check(obj.ptr()), [&](py::handle item, py::ssize_t i) {
                           return json_ready(item, path + "[" + std::to_string(i) + "]", open);
                         });
  open.pop_back();
  return out;
}

// `obj` as json.dumps can write it exactly, each value checked where it stands: numpy scalars become the
// Python values they equal and numpy arrays of bools, ints or floats lists of them; a float that is not finite
// (json.dumps writes NaN, which JSON has not) raises ValueError, another type TypeError, naming its path
// ("replay: trace['steps'][3]['tokens']").
py::object json_ready(py::handle obj, const std::string& path, OpenContainers& open) {
  if (obj.is_none() || PyBool_Check(obj.ptr()) || PyUnicode_Check(obj.ptr()) || PyLong_Check(obj.ptr())) {
    return py::reinterpret_borrow<py::object>(obj);
  }
  if (PyFloat_Check(obj.ptr())) {
    if (!std::isfinite(PyFloat_AsDouble(obj.ptr()))) {
      throw py::value_error(path + ": " + std::string(py::repr(obj)) + " is not a JSON number");
    }
    return py::reinterpret_borrow<py::object>(obj);
  }
  if (PyDict_Check(obj.ptr()) || PyList_Check(obj.ptr()) || PyTuple_Check(obj.ptr())) {
    return json_ready_container(obj, path, open);
  }
  if (py::object value = numpy_scalar_value(obj)) return json_ready(value, path, open);
  if (py::isinstance<py::array>(obj)) {
    const auto a = py::reinterpret_borrow<py::array>(obj);
    const char kind = dtype_kind(a);
    if (kind == 'b' || kind == 'i' || kind == 'u' || kind == 'f') return json_ready(a.attr("tolist")(), path, open);
  }
  throw py::type_error(
      path + ": expected a JSON value (dict, list, str, int, float, bool or None), got " + type_name(obj) +
      (py::isinstance<py::array>(obj) ? " of dtype " + dtype_str(py::reinterpret_borrow<py::array>(obj)) : ""));
}

}  // namespace

std::string json_text(py::handle obj, const std::string& what) {
  OpenContainers open;
  const py::object ready = json_ready(obj, what, open);
  return utf8_arg(json_module().attr("dumps")(ready, py::arg("ensure_ascii") = false), what);
}

}  // namespace orbit_py

#include "field_repr.h"

namespace py = pybind11;

namespace orbit_py {

namespace {

bool field_is_scalar(py::handle v) {
  return py::isinstance<py::bool_>(v) || py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v) ||
         py::isinstance<py::str>(v) || py::isinstance<py::bytes>(v) || v.is_none();
}

std::string field_type_name(py::handle v) { return py::str(py::type::handle_of(v).attr("__name__")); }

// A list or tuple: whole when short and of scalars, else "[N Type]".
std::string field_sequence_repr(py::handle v) {
  const py::sequence items = py::reinterpret_borrow<py::sequence>(v);
  const std::size_t n = py::len(items);
  bool scalars = n <= kWholeItems;
  for (std::size_t i = 0; scalars && i < n; ++i) scalars = field_is_scalar(items[i]);
  if (scalars) return py::repr(v);
  return "[" + std::to_string(n) + " " + field_type_name(items[0]) + "]";
}

std::string field_value_repr(py::handle v) {
  if (py::hasattr(py::type::handle_of(v), "__members__")) return py::str(v);  // an enum: its C++ name
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) return field_sequence_repr(v);
  if (py::isinstance<py::dict>(v) && py::len(v) > kWholeItems) return "{" + std::to_string(py::len(v)) + " entries}";
  return py::repr(v);
}

}  // namespace

std::string fields_repr(py::handle self) {
  const py::handle cls = py::type::handle_of(self);
  std::string out = field_type_name(self) + "(";
  bool first = true;
  const py::object property = py::module_::import("builtins").attr("property");
  // The class's own dict, in definition order (def_readonly and def_property_readonly make properties).
  for (const auto& [name, attr] : py::dict(cls.attr("__dict__"))) {
    if (!py::isinstance(attr, property)) continue;
    const std::string field = py::str(name);
    out += (first ? "" : ", ") + field + "=" + field_value_repr(self.attr(field.c_str()));
    first = false;
  }
  return out + ")";
}

}  // namespace orbit_py

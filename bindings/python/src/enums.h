// Enum construction from an integer that refuses values no member holds.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "convert.h"

namespace orbit_py {

namespace py = pybind11;

// Makes `E(value)` raise ValueError naming the enum and its members when no member holds `value` (py::enum_
// alone accepts any integer, and such a value's str() then printed some member's name), and TypeError for a
// value that is not an int (a bool included). It replaces py::enum_'s own `__init__(value: int)` rather than
// adding an overload before it, which no call could reach and help() listed. Call it after the last .value():
// it reads the members registered so far.
template <typename E>
void refuse_unknown_values(py::enum_<E>& e) {
  using Scalar = std::underlying_type_t<E>;
  std::vector<std::pair<Scalar, std::string>> known;
  for (auto item : py::dict(e.attr("__members__")))
    known.emplace_back(static_cast<Scalar>(item.second.cast<E>()), item.first.cast<std::string>());
  const std::string name = py::str(e.attr("__name__"));
  py::delattr(e, "__init__");
  e.def(py::init([known, name](const py::object& arg) {
          // Strict, as every int argument: a bool (True, which pybind11 read as 1) raises TypeError.
          const int64_t value = to_int(arg, (name + "(value)").c_str());
          std::string members;
          for (const auto& [v, member] : known) {
            if (static_cast<int64_t>(v) == value) return static_cast<E>(v);
            members += (members.empty() ? "" : ", ") + member + "=" + std::to_string(v);
          }
          throw py::value_error(name + "(value): " + std::to_string(value) + " is not a " + name +
                                " (members: " + members + ")");
        }),
        py::arg("value"));
}

}  // namespace orbit_py

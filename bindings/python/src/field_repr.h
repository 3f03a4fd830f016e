// The repr of the reports and results the module returns: "Name(field=value, ...)" over every property the
// object's class defines, in the order the class defines them, so that a field added to a binding is shown
// without a repr to keep in step (IdleReport's left heal_planned and half its fields out).
//
// A value is shown as Python's repr shows it, except: an enum by its C++ name (str(), e.g. op=admit); a list or
// tuple of more than kWholeItems items, or of items that are not numbers, bools or strings, by its length and
// its first item's type (e.g. plans=[3 Plan], tokens=[120 int]); a dict of more than kWholeItems entries by
// its length.
//
// Thread-safety: holds the GIL (a repr).
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <string>

namespace orbit_py {

inline constexpr std::size_t kWholeItems = 32;

std::string fields_repr(pybind11::handle self);

}  // namespace orbit_py

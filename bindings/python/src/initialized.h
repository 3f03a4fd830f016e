// Casters that refuse an instance whose __init__ never ran. pybind11's __new__ alone (Cls.__new__(Cls)) gives a
// class with a constructor an instance with no C++ object under it: pybind11 then hands a method uninitialized
// memory (a Policy of garbage fields, a CancelToken reading a garbage flag, a crash) or, for a shared_ptr self,
// raises a RuntimeError naming no class. These casters, declared for every class bound with a constructor,
// raise TypeError naming the class instead, before the method runs. (Classes bound without a constructor refuse
// __new__ itself: orbit/__init__.py.) Must be included before any use of those classes' casters in a file.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <typeinfo>

#include "orbit/constraint_cache.h"
#include "orbit/engine.h"
#include "orbit/planner/prefix_cache.h"
#include "orbit/policy.h"

namespace orbit_py {

// Throws TypeError when `src` is an instance of the Python class bound to `type` whose __init__ never ran.
inline void check_initialized(pybind11::handle src, const std::type_info& type) {
  namespace d = pybind11::detail;
  const d::type_info* info = d::get_type_info(type);
  if (info == nullptr || !PyObject_TypeCheck(src.ptr(), info->type)) return;
  const d::value_and_holder v_h = reinterpret_cast<d::instance*>(src.ptr())->get_value_and_holder(info, false);
  // pybind11's __new__ leaves the value pointer null (a method's cast would then allocate it, uninitialized);
  // __init__ and C++-made instances (references to members included, which hold no holder) set it.
  if (v_h && v_h.value_ptr() != nullptr) return;
  const std::string name = pybind11::str(pybind11::handle(reinterpret_cast<PyObject*>(info->type)).attr("__name__"));
  throw pybind11::type_error("this orbit." + name + " was made by " + name + ".__new__ without __init__ and holds " +
                             "nothing; create one with orbit." + name + "(...)");
}

// True when `obj` is an instance of a pybind11-bound class whose C++ object exists (its __init__ ran, or C++ made
// it). run_constructors_once (module.cpp) asks before running a constructor: pybind11 ignored a second
// __init__ on a live instance silently.
inline bool holds_object(pybind11::handle obj) {
  namespace d = pybind11::detail;
  if (d::get_type_info(Py_TYPE(obj.ptr())) == nullptr) return false;
  const d::value_and_holder v_h = reinterpret_cast<d::instance*>(obj.ptr())->get_value_and_holder();
  return v_h && v_h.value_ptr() != nullptr;
}

}  // namespace orbit_py

namespace pybind11::detail {

template <typename T>
class initialized_caster : public type_caster_base<T> {
 public:
  bool load(handle src, bool convert) {
    orbit_py::check_initialized(src, typeid(T));
    return type_caster_base<T>::load(src, convert);
  }
};

template <typename T>
class initialized_holder_caster : public copyable_holder_caster<T, std::shared_ptr<T>> {
 public:
  bool load(handle src, bool convert) {
    orbit_py::check_initialized(src, typeid(T));
    return copyable_holder_caster<T, std::shared_ptr<T>>::load(src, convert);
  }
};

}  // namespace pybind11::detail

// Declares the checking caster for a class bound with a constructor, and for one whose holder is a
// std::shared_ptr, the holder's too. At namespace scope, right after T is complete.
#define ORBIT_PY_INITIALIZED_CASTER(T)                    \
  namespace pybind11::detail {                            \
  template <>                                             \
  class type_caster<T> : public initialized_caster<T> {}; \
  }
#define ORBIT_PY_INITIALIZED_SHARED_CASTER(T)                                     \
  ORBIT_PY_INITIALIZED_CASTER(T)                                                  \
  namespace pybind11::detail {                                                    \
  template <>                                                                     \
  class type_caster<std::shared_ptr<T>> : public initialized_holder_caster<T> {}; \
  }

ORBIT_PY_INITIALIZED_SHARED_CASTER(orbit::Engine)
ORBIT_PY_INITIALIZED_CASTER(orbit::WindowPolicy)
ORBIT_PY_INITIALIZED_CASTER(orbit::ConstraintCacheOptions)
ORBIT_PY_INITIALIZED_CASTER(orbit::planner::RadixCache)
ORBIT_PY_INITIALIZED_CASTER(orbit::planner::BlockPrefixCache)

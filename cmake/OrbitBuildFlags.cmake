# Warning, warnings-as-errors and sanitizer flags for every target orbit defines (libraries, tests, the CLI,
# tools, benchmarks, the Python module), applied per target after all of them exist: no directory-wide
# compile settings. Included once, at the end of the top-level CMakeLists.txt.
#
#   ORBIT_WERROR=ON                      -Werror on C++ sources
#   ORBIT_SANITIZE=address,undefined     ASan + UBSan (compile and link); or =thread for TSan
#   ORBIT_SANITIZE_EXCLUDE=alignment,null  checks of those left out (-fno-sanitize=...; empty: none)
#   ORBIT_LINKER=gold                    -fuse-ld=gold on every executable and module (the default where the
#                                        compiler accepts it; empty: the toolchain's default, GNU ld)
#
# gold, which binutils installs beside GNU ld, links a test executable in 0.29 s against 2.19 s (test_window,
# 2 cores): the build links some 80 executables, each against libtorch and orbit's static libraries.
#
# Imported targets (torch, Catch2, ...) are untouched; their headers are SYSTEM includes.

include(CheckLinkerFlag)
if(NOT DEFINED ORBIT_LINKER)
  check_linker_flag(CXX "-fuse-ld=gold" ORBIT_HAVE_GOLD)
  set(_orbit_linker_default "")
  if(ORBIT_HAVE_GOLD)
    set(_orbit_linker_default gold)
  endif()
  set(ORBIT_LINKER "${_orbit_linker_default}" CACHE STRING "Linker for executables and modules (-fuse-ld=...; empty: the default)")
endif()

function(_orbit_collect_targets dir out)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _orbit_collect_targets("${sub}" sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(orbit_apply_build_flags)
  # Options structs are meant to be filled with designated initializers naming only what differs from the
  # defaults ({.model = ...}); -Wextra's missing-field-initializers would flag every such use.
  set(warn -Wall -Wextra -Wno-missing-field-initializers)
  if(ORBIT_WERROR)
    list(APPEND warn -Werror)
  endif()
  set(san_compile "")
  set(san_link "")
  if(ORBIT_SANITIZE)
    if(NOT ORBIT_SANITIZE MATCHES "^(address|undefined|address,undefined|undefined,address|thread)$")
      message(FATAL_ERROR "ORBIT_SANITIZE='${ORBIT_SANITIZE}': use address,undefined or thread")
    endif()
    # Debug info comes from the build type or CMAKE_CXX_FLAGS (scripts/sanitize.sh: -O0 -g1, line tables
    # for the reports' stacks); frame pointers keep those stacks whole.
    set(san_compile -fsanitize=${ORBIT_SANITIZE} -fno-omit-frame-pointer)
    if(ORBIT_SANITIZE MATCHES "undefined")
      list(APPEND san_compile -fno-sanitize-recover=undefined)
    endif()
    set(san_link -fsanitize=${ORBIT_SANITIZE})
    if(ORBIT_SANITIZE_EXCLUDE)
      if(NOT ORBIT_SANITIZE_EXCLUDE MATCHES "^[a-z-]+(,[a-z-]+)*$")
        message(FATAL_ERROR "ORBIT_SANITIZE_EXCLUDE='${ORBIT_SANITIZE_EXCLUDE}': give check names separated by commas")
      endif()
      list(APPEND san_compile -fno-sanitize=${ORBIT_SANITIZE_EXCLUDE})  # after -fsanitize, so that it wins
    endif()
  elseif(ORBIT_SANITIZE_EXCLUDE)
    message(FATAL_ERROR "ORBIT_SANITIZE_EXCLUDE='${ORBIT_SANITIZE_EXCLUDE}' needs ORBIT_SANITIZE")
  endif()
  _orbit_collect_targets("${PROJECT_SOURCE_DIR}" targets)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(NOT type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$")
      continue()
    endif()
    target_compile_options(${t} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${warn}>)
    if(ORBIT_LINKER AND NOT type MATCHES "^(STATIC_LIBRARY|OBJECT_LIBRARY)$")
      target_link_options(${t} PRIVATE -fuse-ld=${ORBIT_LINKER})
    endif()
    get_target_property(no_sanitize ${t} ORBIT_NO_SANITIZE)  # third-party code compiled here (Catch2's runner)
    if(san_compile AND NOT no_sanitize)
      target_compile_options(${t} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${san_compile}>)
      if(NOT type MATCHES "^(STATIC_LIBRARY|OBJECT_LIBRARY)$")
        target_link_options(${t} PRIVATE ${san_link})
      endif()
    endif()
  endforeach()
endfunction()

orbit_apply_build_flags()

# How the C++ tests become executables and CTest entries (included by tests/CMakeLists.txt).
#
# Each test is a file tests/cpp/<name>.cpp (plus any SOURCES) and a CTest entry of that name. With
# ORBIT_TEST_GROUPS (the default) the test files are compiled into a few shared executables,
# orbit_tests_<kind>_<n> with up to ORBIT_TEST_GROUP_SIZE files each, each executable one unity batch: the headers
# (Catch, ATen, nlohmann, orbit's) are parsed, and their inline functions compiled, once per executable instead
# of once per file, and a dozen executables are linked instead of a hundred and fifty. On 2 cores six sync tests
# took 8.9 s to compile as one batch against 19.3 s one by one; the 157 grouped files took 375 s serial in 19
# batches of 8 and 245 s in 10 of 16. Each CTest entry runs its own files' cases alone, selected by
# Catch's file-name tags: `orbit_tests_light_2 -# -w NoTests "[#test_sync_memo]~[.]"` (hidden cases stay
# hidden; a filter that matches no case fails). build/tests/<name> is a script that does the same, or passes its
# arguments to the executable as given (a test name or a hidden tag such as "[.sync-diff]").
#
# Kinds: `aten` (orbit::runtime and the ATen precompiled header), `light` (orbit::runtime and the Catch-only
# one: the test names no ATen), `free` (TORCH_FREE: only its LIBS and Catch, no libtorch). A test whose file
# changes the whole process (replaces operator new, defines orbit_test_skip_reason, skips the precompiled
# header) is SOLO: an executable of its own, as every test is with ORBIT_TEST_GROUPS=OFF. ORBIT_TEST_SELECT (a list
# of test names) groups only those and gives the others executables of their own: the sanitizer builds
# (scripts/sanitize.sh) build only the tests they run, grouped among themselves.
#
# Files grouped together share one translation unit, so each grouped file puts everything after its includes in
# `namespace ORBIT_TEST_FILE { ... }`: CMake defines ORBIT_TEST_FILE to a name of its own for each file (in a
# unity batch, UNITY_BUILD_UNIQUE_ID), so one file's helpers, aliases and using-directives neither clash with
# nor leak into the next file's (a grouped file without it is refused here). Test case names must be unique in
# an executable: Catch refuses a repeated one when the executable starts.

option(ORBIT_TEST_GROUPS "Compile the C++ test files into a few shared executables (unity batches)" ON)
set(ORBIT_TEST_GROUP_SIZE 16 CACHE STRING "Test files per shared test executable (ORBIT_TEST_GROUPS)")
set(ORBIT_TEST_SELECT "" CACHE STRING "With ORBIT_TEST_GROUPS: the tests to group (empty: all); the others are SOLO")
if(NOT ORBIT_TEST_GROUP_SIZE MATCHES "^[1-9][0-9]*$")
  message(FATAL_ERROR "ORBIT_TEST_GROUP_SIZE='${ORBIT_TEST_GROUP_SIZE}': give a positive number of files")
endif()

# Sets `out` to TRUE when a test's sources, or the tests/cpp headers they include (transitively; not
# orbit_catch.h), name ATen, torch or c10 (`at::`, `torch::`, `c10::`, or an include of theirs). A change to
# any of them re-runs the configuration, so the choice follows the code.
function(orbit_test_uses_aten out)
  set(queue ${ARGN})
  set(seen)
  set(uses FALSE)
  while(queue)
    list(POP_FRONT queue file)
    if(file IN_LIST seen OR NOT EXISTS "${file}")
      continue()
    endif()
    list(APPEND seen "${file}")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${file}")
    file(READ "${file}" text)
    if(text MATCHES "(^|[^A-Za-z0-9_:])(at|torch|c10)::" OR text MATCHES "#include <(ATen|torch|c10)/")
      set(uses TRUE)
      break()
    endif()
    string(REGEX MATCHALL "#include \"[A-Za-z0-9_]+\\.h\"" includes "${text}")
    foreach(include IN LISTS includes)
      string(REGEX REPLACE "#include \"(.*)\"" "\\1" header "${include}")
      if(NOT header STREQUAL "orbit_catch.h")  # the precompiled header itself, ATen in one form
        list(APPEND queue "${CMAKE_CURRENT_SOURCE_DIR}/cpp/${header}")
      endif()
    endforeach()
  endwhile()
  set(${out} ${uses} PARENT_SCOPE)
endfunction()

# The executable a new test of `kind` goes into, `files` files long: the kind's current group while it has
# room, else the next one.
function(_orbit_test_group out kind files)
  get_property(index GLOBAL PROPERTY ORBIT_TEST_GROUP_${kind}_INDEX)
  get_property(fill GLOBAL PROPERTY ORBIT_TEST_GROUP_${kind}_FILL)
  if(NOT index)
    set(index 1)
    set(fill 0)
  endif()
  math(EXPR after "${fill} + ${files}")
  if(fill GREATER 0 AND after GREATER ORBIT_TEST_GROUP_SIZE)
    math(EXPR index "${index} + 1")
    set(after ${files})
  endif()
  set_property(GLOBAL PROPERTY ORBIT_TEST_GROUP_${kind}_INDEX ${index})
  set_property(GLOBAL PROPERTY ORBIT_TEST_GROUP_${kind}_FILL ${after})
  set(${out} orbit_tests_${kind}_${index} PARENT_SCOPE)
endfunction()

# The Catch test spec that selects the cases of `files` (their file-name tags), with `filter` (one spec such as
# "~[slow]", or none) joined to each; hidden cases only where the filter names a hidden tag.
function(_orbit_test_spec out files filter)
  list(LENGTH filter n)
  if(n GREATER 1)
    message(FATAL_ERROR "a grouped test takes at most one ARGS value, a Catch test spec; got '${filter}'")
  endif()
  set(hidden "~[.]")
  if(filter MATCHES "\\[\\.")
    set(hidden "")
  endif()
  set(parts)
  foreach(file IN LISTS files)
    get_filename_component(stem "${file}" NAME_WE)
    list(APPEND parts "[#${stem}]${hidden}${filter}")
  endforeach()
  list(JOIN parts "," spec)
  set(${out} "${spec}" PARENT_SCOPE)
endfunction()

# A CTest entry `entry` that runs the cases of test `name` (with `filter`, see _orbit_test_spec).
function(_orbit_test_entry entry name filter)
  set_property(GLOBAL APPEND PROPERTY ORBIT_TEST_ENTRIES ${entry})
  get_property(exe GLOBAL PROPERTY ORBIT_TEST_${name}_EXE)
  if(exe STREQUAL name)
    add_test(NAME ${entry} COMMAND ${exe} ${filter})
  else()
    get_property(files GLOBAL PROPERTY ORBIT_TEST_${name}_SOURCES)
    _orbit_test_spec(spec "${files}" "${filter}")
    add_test(NAME ${entry} COMMAND ${exe} "-#" -w NoTests "${spec}")
  endif()
endfunction()

# orbit_add_test(<name> LABELS <l>... [LIBS <lib>...] [SOURCES <src>...] [ARGS <spec>] [INCLUDES <dir>...]
#                [DEFINES <NAME=value>...] [DEPENDS <target>...] [ATEN] [SOLO] [TORCH_FREE]):
# tests/cpp/<name>.cpp (and SOURCES, relative to tests/) -> CTest entry <name> (running ARGS, a Catch test spec,
# e.g. "~[slow]"). ATEN: the ATen header even where the sources do not name ATen (one of orbit's headers brings
# it). TORCH_FREE: links LIBS and Catch only. INCLUDES, DEFINES, DEPENDS: the executable's include directories,
# compile definitions and build dependencies (a grouped executable takes its tests' together; one name defined
# with two values is refused). The executable is made by orbit_finish_tests().
function(orbit_add_test name)
  cmake_parse_arguments(ARG "ATEN;SOLO;TORCH_FREE" "" "LABELS;LIBS;SOURCES;ARGS;INCLUDES;DEFINES;DEPENDS" ${ARGN})
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "orbit_add_test(${name}): unknown arguments '${ARG_UNPARSED_ARGUMENTS}'")
  endif()
  get_property(known GLOBAL PROPERTY ORBIT_TEST_${name}_EXE SET)
  if(known)
    message(FATAL_ERROR "orbit_add_test(${name}): a test of that name exists")
  endif()
  set(files ${CMAKE_CURRENT_SOURCE_DIR}/cpp/${name}.cpp)
  foreach(src IN LISTS ARG_SOURCES)
    list(APPEND files ${CMAKE_CURRENT_SOURCE_DIR}/${src})
  endforeach()
  if(ARG_TORCH_FREE)
    set(kind free)
  else()
    orbit_test_uses_aten(uses_aten ${files})
    set(kind light)
    if(ARG_ATEN OR uses_aten)
      set(kind aten)
    endif()
  endif()
  if(NOT ARG_SOLO)
    foreach(file IN LISTS files)
      file(READ "${file}" text)
      if(text MATCHES "orbit_test_skip_reason|void\\* operator new")
        message(FATAL_ERROR "${file} changes its whole executable (orbit_test_skip_reason, operator new): "
                            "give its orbit_add_test SOLO")
      endif()
      if(NOT text MATCHES "\nnamespace ORBIT_TEST_FILE {")
        message(FATAL_ERROR "${file}: put what follows its includes in `namespace ORBIT_TEST_FILE { ... }` "
                            "(tests/orbit_tests.cmake says why)")
      endif()
    endforeach()
  endif()
  set(exe ${name})
  if(ORBIT_TEST_SELECT AND NOT name IN_LIST ORBIT_TEST_SELECT)
    set(ARG_SOLO TRUE)
  endif()
  if(ORBIT_TEST_GROUPS AND NOT ARG_SOLO)
    list(LENGTH files count)
    _orbit_test_group(exe ${kind} ${count})
  endif()
  # A launcher an earlier configuration wrote where this one links the test's own executable (scripts/sanitize.sh
  # configures twice, the first time grouping every test): removed, or the build would take the script, newer
  # than the test's objects, for an executable already linked.
  set(launcher ${CMAKE_CURRENT_BINARY_DIR}/${name})
  if(exe STREQUAL name AND EXISTS ${launcher} AND NOT IS_DIRECTORY ${launcher})
    file(READ ${launcher} head LIMIT 16)
    if(head MATCHES "^#!/bin/sh\n")
      file(REMOVE ${launcher})
    endif()
  endif()
  foreach(field SOURCES LIBS INCLUDES DEFINES DEPENDS)
    set_property(GLOBAL PROPERTY ORBIT_TEST_${name}_${field} "")
  endforeach()
  set_property(GLOBAL PROPERTY ORBIT_TEST_${name}_SOURCES ${files})
  set_property(GLOBAL PROPERTY ORBIT_TEST_${name}_EXE ${exe})
  set_property(GLOBAL PROPERTY ORBIT_TEST_EXE_${exe}_KIND ${kind})
  get_property(members GLOBAL PROPERTY ORBIT_TEST_EXE_${exe}_MEMBERS)
  if(NOT members)
    set_property(GLOBAL APPEND PROPERTY ORBIT_TEST_EXES ${exe})
  endif()
  set_property(GLOBAL APPEND PROPERTY ORBIT_TEST_EXE_${exe}_MEMBERS ${name})
  orbit_test_extend(${name} LIBS ${ARG_LIBS} INCLUDES ${ARG_INCLUDES} DEFINES ${ARG_DEFINES} DEPENDS ${ARG_DEPENDS})
  _orbit_test_entry(${name} ${name} "${ARG_ARGS}")
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
endfunction()

# orbit_test_extend(<name> [LIBS ...] [INCLUDES ...] [DEFINES ...] [DEPENDS ...]): more of them for a test
# already added (the executable it is in gets them).
function(orbit_test_extend name)
  cmake_parse_arguments(ARG "" "" "LIBS;INCLUDES;DEFINES;DEPENDS" ${ARGN})
  get_property(known GLOBAL PROPERTY ORBIT_TEST_${name}_EXE SET)
  if(NOT known OR ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "orbit_test_extend(${name} ${ARGN}): no such test, or unknown arguments")
  endif()
  foreach(field LIBS INCLUDES DEFINES DEPENDS)
    set_property(GLOBAL APPEND PROPERTY ORBIT_TEST_${name}_${field} ${ARG_${field}})
  endforeach()
endfunction()

# orbit_add_test_entry(<entry> OF <test> ARGS <spec> LABELS <l>...): a second CTest entry running another part
# of a test's cases (e.g. its "[slow]" ones).
function(orbit_add_test_entry entry)
  cmake_parse_arguments(ARG "" "OF" "ARGS;LABELS" ${ARGN})
  get_property(known GLOBAL PROPERTY ORBIT_TEST_${ARG_OF}_EXE SET)
  if(NOT known OR ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "orbit_add_test_entry(${entry} ${ARGN}): no test '${ARG_OF}', or unknown arguments")
  endif()
  _orbit_test_entry(${entry} ${ARG_OF} "${ARG_ARGS}")
  set_tests_properties(${entry} PROPERTIES LABELS "${ARG_LABELS}")
endfunction()

# Refuses a compile definition given two values by the tests of one executable.
function(_orbit_test_check_defines exe)
  set(names)
  foreach(define IN LISTS ARGN)
    string(REGEX REPLACE "=.*" "" key "${define}")
    if(key IN_LIST names)
      message(FATAL_ERROR "${exe}: its tests define ${key} with two values; give one, or make one of them SOLO")
    endif()
    list(APPEND names ${key})
  endforeach()
endfunction()

# build/tests/<name> for a grouped test: runs its cases as its CTest entry does, or passes its arguments on.
function(_orbit_test_launcher name exe)
  get_property(files GLOBAL PROPERTY ORBIT_TEST_${name}_SOURCES)
  _orbit_test_spec(spec "${files}" "")
  file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/${name}
    CONTENT "#!/bin/sh\n# ${name}'s cases, compiled into ${exe} (tests/orbit_tests.cmake). No arguments: its cases, as\n# CTest runs them; otherwise the arguments (a test name or tag, Catch's options) go to ${exe} as given.\n[ $# -gt 0 ] || exec \"$<TARGET_FILE:${exe}>\" -# -w NoTests \"${spec}\"\nexec \"$<TARGET_FILE:${exe}>\" \"$@\"\n"
    FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endfunction()

# The executables of every test added: call once, after the last orbit_add_test.
function(orbit_finish_tests)
  get_property(entries GLOBAL PROPERTY ORBIT_TEST_ENTRIES)
  foreach(name IN LISTS ORBIT_TEST_SELECT)
    if(NOT name IN_LIST entries)
      message(FATAL_ERROR "ORBIT_TEST_SELECT names '${name}', which is no test added with orbit_add_test")
    endif()
  endforeach()
  get_property(exes GLOBAL PROPERTY ORBIT_TEST_EXES)
  foreach(exe IN LISTS exes)
    get_property(kind GLOBAL PROPERTY ORBIT_TEST_EXE_${exe}_KIND)
    get_property(members GLOBAL PROPERTY ORBIT_TEST_EXE_${exe}_MEMBERS)
    foreach(field SOURCES LIBS INCLUDES DEFINES DEPENDS)
      set(${field})
      foreach(name IN LISTS members)
        get_property(values GLOBAL PROPERTY ORBIT_TEST_${name}_${field})
        list(APPEND ${field} ${values})
      endforeach()
      list(REMOVE_DUPLICATES ${field})
    endforeach()
    add_executable(${exe} ${SOURCES} ${ORBIT_CATCH_MAIN})
    target_include_directories(${exe} PRIVATE ${ORBIT_CATCH2_INCLUDE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/cpp ${INCLUDES})
    list(APPEND DEFINES ORBIT_MODELS_DIR="${ORBIT_MODELS_DIR}" ORBIT_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
    if(kind STREQUAL "free")
      target_compile_features(${exe} PRIVATE cxx_std_17)
      target_link_libraries(${exe} PRIVATE ${LIBS})
    else()
      target_link_libraries(${exe} PRIVATE orbit::runtime ${LIBS})
      list(APPEND DEFINES ORBIT_CLI_PATH="$<TARGET_FILE:orbit_cli>")
      if(kind STREQUAL "aten")
        target_precompile_headers(${exe} REUSE_FROM orbit_test_pch)
      else()
        target_precompile_headers(${exe} REUSE_FROM orbit_test_pch_light)
        list(APPEND DEFINES ORBIT_TEST_WITHOUT_ATEN)
      endif()
    endif()
    list(REMOVE_DUPLICATES DEFINES)
    _orbit_test_check_defines(${exe} ${DEFINES})
    target_compile_definitions(${exe} PRIVATE ${DEFINES})
    # ORBIT_TEST_FILE, a name of each file's own: in a unity build CMake defines it per file of a batch; without
    # one, each file is given its own here (a per-file definition would keep a file out of the unity batches).
    if(CMAKE_UNITY_BUILD)
      set_target_properties(${exe} PROPERTIES UNITY_BUILD_UNIQUE_ID ORBIT_TEST_FILE UNITY_BUILD_BATCH_SIZE ${ORBIT_TEST_GROUP_SIZE})
    else()
      foreach(source IN LISTS SOURCES)
        get_filename_component(stem "${source}" NAME_WE)
        set_source_files_properties(${source} PROPERTIES COMPILE_DEFINITIONS ORBIT_TEST_FILE=orbit_${stem})
      endforeach()
    endif()
    if(DEPENDS)
      add_dependencies(${exe} ${DEPENDS})
    endif()
    if(NOT members STREQUAL exe)
      foreach(name IN LISTS members)
        _orbit_test_launcher(${name} ${exe})
      endforeach()
    endif()
  endforeach()
endfunction()

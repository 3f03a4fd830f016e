# `cmake --install` of the C++ SDK as a CMake package: find_package(orbit) then link orbit::sdk (and
# orbit::eval for the trace harness, orbit/trace.h).
#
#   <prefix>/include/orbit/...                     the public headers of every library below
#   <prefix>/lib/liborbit_{common,runtime,...}.a   orbit::sdk, orbit::eval and the static libraries they link
#   <prefix>/lib/cmake/orbit/                      orbitConfig.cmake, orbitConfigVersion.cmake, orbitTargets.cmake
#
# orbit::sdk is a static library: its private dependencies (orbit::runtime, orbit::planner, orbit::store and
# through them libtorch, SQLite, hiredis, OpenSSL, Boost) reach its users' link lines, so the export set holds
# every orbit library and orbitConfig.cmake finds the same packages this build found (find_dependency).
# Included once, from the top-level CMakeLists.txt, after every target exists.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ORBIT_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/orbit" CACHE STRING
    "Where orbitConfig.cmake goes, relative to the install prefix")

set(_orbit_exported orbit_common orbit_runtime orbit_planner orbit_store orbit_sdk orbit_eval)
foreach(t orbit_keys orbit_plan orbit_apply orbit_kernels_cuda)  # orbit_plan, orbit_apply: the sdk's torch-free planner and apply decisions (internal)
  if(TARGET ${t})
    list(APPEND _orbit_exported ${t})
  endif()
endforeach()
foreach(t IN LISTS _orbit_exported)
  string(REGEX REPLACE "^orbit_" "" _name "${t}")
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${_name})  # orbit_sdk -> orbit::sdk, as in this build
endforeach()

install(TARGETS ${_orbit_exported} EXPORT orbitTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(dir common runtime planner store sdk eval)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.h")
endforeach()
install(EXPORT orbitTargets NAMESPACE orbit:: DESTINATION ${ORBIT_INSTALL_CMAKEDIR})

# What orbitConfig.cmake must find again (substituted into cmake/orbitConfig.cmake.in).
# (runtime/ found OpenMP in its own directory scope: its link libraries say whether it did.)
get_target_property(_orbit_runtime_libs orbit_runtime LINK_LIBRARIES)
set(ORBIT_CONFIG_WITH_OPENMP FALSE)
if("OpenMP::OpenMP_CXX" IN_LIST _orbit_runtime_libs)
  set(ORBIT_CONFIG_WITH_OPENMP TRUE)
endif()
set(ORBIT_CONFIG_WITH_CUDA FALSE)
if(TARGET orbit_kernels_cuda)
  set(ORBIT_CONFIG_WITH_CUDA TRUE)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/orbitConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/orbitConfig.cmake INSTALL_DESTINATION ${ORBIT_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/orbitConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)  # 0.x: a minor release may break the API
install(FILES ${PROJECT_BINARY_DIR}/orbitConfig.cmake ${PROJECT_BINARY_DIR}/orbitConfigVersion.cmake
        DESTINATION ${ORBIT_INSTALL_CMAKEDIR})

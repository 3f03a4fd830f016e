# Sourced ON THE GPU MACHINE by build-gpu.sh and bench/gpu/run_gpu.sh: unpacks the .deb files of
# scripts/device/fetch-debs.sh (in .carry/debs) into /tmp/deps, never into /, and points CMake and
# pkg-config at them. The machine has no hiredis, so the store's pkg-config lookup must find the carried
# hiredis.pc, with its paths moved under /tmp/deps; where the machine has no pkg-config either, the carried
# pkgconf runs through a wrapper that finds its own library.
ls .carry/debs/*.deb >/dev/null 2>&1 || { echo "error: no .carry/debs/*.deb (run scripts/device/fetch-debs.sh here, carry .carry)" >&2; exit 1; }
mkdir -p /tmp/deps
for f in .carry/debs/*.deb; do dpkg -x "$f" /tmp/deps; done
export PKG_CONFIG_LIBDIR=/tmp/deps/usr/lib/x86_64-linux-gnu/pkgconfig:/tmp/deps/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=/tmp/deps
if ! command -v pkg-config >/dev/null 2>&1; then
  printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu exec /tmp/deps/usr/bin/pkgconf "$@"\n' > /tmp/deps/pkg-config
  chmod +x /tmp/deps/pkg-config
  export PKG_CONFIG=/tmp/deps/pkg-config
fi
# orbit's executables find the carried libraries through their RUNPATH, but a library they need needs
# others in turn (libicuuc -> libicudata), which the loader looks up without it: programs built here run
# with ORBIT_DEPS_RUN (env "${ORBIT_DEPS_RUN[@]}" prog ...).
ORBIT_DEPS_RUN=(LD_LIBRARY_PATH="/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
orbit_deps_cmake_args=(-DCMAKE_PREFIX_PATH="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)');/tmp/deps/usr"
                       -DOPENSSL_ROOT_DIR=/tmp/deps/usr)

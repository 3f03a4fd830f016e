#!/usr/bin/env bash
# Run HERE (a Debian 12 machine with apt): downloads the Debian packages a GPU machine lacks to build orbit
# (Boost headers, SQLite, OpenSSL headers, nlohmann-json, Catch2, hiredis, pkgconf, PCRE2 and ICU for
# tokenizer.json, cpp-httplib with zlib and Brotli for `orbit serve`) into .carry/debs (git-ignored), ~39 MB
# of .deb files. Then name `.carry` in the device tool's `carry` and run scripts/device/build-gpu.sh there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
mkdir -p .carry/debs
cd .carry/debs
apt-get download libboost1.74-dev catch2 libsqlite3-0 libsqlite3-dev libssl-dev libssl3 nlohmann-json3-dev \
  libhiredis0.14 libhiredis-dev pkgconf-bin libpkgconf3 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 \
  libpcre2-posix3 libicu-dev libicu72 libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1 zlib1g-dev
ls -la

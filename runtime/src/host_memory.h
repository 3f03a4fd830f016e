// Internal to the runtime: how the process's heap treats the host memory a CPU forward frees.
//
// A forward over hundreds of rows allocates tensors of hundreds of kilobytes to megabytes per operation
// (TinyStories-656K at 640 rows: 0.3-1 MB each, about 8 MB per layer) and frees them before the next
// forward. glibc's malloc serves blocks above its mmap threshold (128 KiB at start, raised towards 32 MiB
// as such blocks are freed) with fresh mappings, and gives the top of its heap back to the kernel whenever
// more than its trim threshold (twice the mmap threshold) lies free there: so the next forward's tensors
// land on pages the kernel must fault in and zero again, about 2,400 page faults per forward at 640 rows,
// a fifth of its time. Short forwards (tens of rows) stay under both thresholds and never fault.
#pragma once

namespace orbit::runtime::detail {

// Fixes glibc's mmap threshold at 32 MiB (its sliding threshold's own ceiling on 64-bit) and its trim
// threshold at 64 MiB (twice that, as glibc pairs them), once per process: tensors under 32 MiB come from the
// heap, and up to 64 MiB freed at its top stay mapped for the next forward to reuse. Left as it is where the
// environment already sets malloc's thresholds (GLIBC_TUNABLES naming a glibc.malloc tunable, or
// MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_, MALLOC_MMAP_MAX_) and on other C libraries.
// Returns whether the thresholds are set (the first call decides; later calls return its answer).
// Thread-safe. Model's constructor calls it for a model on the CPU.
bool keep_freed_host_memory();

}  // namespace orbit::runtime::detail

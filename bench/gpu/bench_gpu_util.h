// Helpers shared by bench_gpu's sections (bench_gpu.cpp, bench_gpu_kernels.cpp, bench_gpu_recall.cpp): timing
// that waits for the device and its JSON and text forms, pools filled with random content, random content of a
// model's shape, token ids and inputs, and NVTX ranges around each timed arm.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "orbit/runtime/device.h"
#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/reuse.h"

#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define BENCH_RANGE_PUSH(name) nvtxRangePushA(name)
#define BENCH_RANGE_POP() nvtxRangePop()
#else
#define BENCH_RANGE_PUSH(name) ((void)0)
#define BENCH_RANGE_POP() ((void)0)
#endif

namespace orbit::bench_gpu {

namespace rt = orbit::runtime;

// Waits for the device: a scalar read back to the host completes after all queued work.
inline void sync(const c10::Device& device) {
  if (device.is_cuda()) (void)at::zeros({1}, at::TensorOptions().device(device)).sum().item<float>();
}

// Seconds of one arm over its timed runs: the median and the spread (fastest and slowest run).
struct Timing {
  double median = 0, min = 0, max = 0;
  int runs = 0;
  Timing scaled(double f) const { return {median * f, min * f, max * f, runs}; }
};

// `reps` runs after one warm-up, each waited for.
inline Timing timed_spread(const c10::Device& device, int reps, const std::function<void()>& fn) {
  fn();
  sync(device);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    sync(device);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), t.back(), reps};
}

// Median seconds of `reps` runs after one warm-up.
inline double timed(const c10::Device& device, int reps, const std::function<void()>& fn) {
  return timed_spread(device, reps, fn).median;
}

// Seconds per call of a short kernel: `iters` back-to-back calls between two waits, `reps` times (the
// wait's own cost is spread over the calls).
inline Timing timed_loop_spread(const c10::Device& device, int reps, int iters, const std::function<void()>& fn) {
  return timed_spread(device, reps,
                      [&] {
                        for (int i = 0; i < iters; ++i) fn();
                      })
      .scaled(1.0 / iters);
}

inline double timed_loop(const c10::Device& device, int reps, int iters, const std::function<void()>& fn) {
  return timed_loop_spread(device, reps, iters, fn).median;
}

// An arm's timing in a JSON row: KEY_s (the median), KEY_min_s and KEY_max_s.
inline void put(nlohmann::json& row, const std::string& key, const Timing& t) {
  row[key + "_s"] = t.median;
  row[key + "_min_s"] = t.min;
  row[key + "_max_s"] = t.max;
}

// "12.41 ms [12.30-12.90]": the median and the spread.
inline std::string ms(const Timing& t) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.2f ms [%.2f-%.2f]", t.median * 1e3, t.min * 1e3, t.max * 1e3);
  return buf;
}

// A KV pool holding `tokens` tokens of content, one sequence written in order; slots [tokens].
struct FilledPool {
  std::unique_ptr<rt::KVPool> pool;
  at::Tensor slots;
};

inline FilledPool fill_pool(const rt::Model& m, int64_t tokens, int64_t page_size) {
  const rt::ModelConfig& c = m.config();
  rt::KVPoolOptions o;
  o.num_layers = c.num_layers;
  o.page_size = page_size;
  o.widths = c.content_widths();
  o.dtype = m.dtype();
  o.device = rt::device_name(m.device());
  o.num_pages = (tokens + page_size - 1) / page_size + 1;
  FilledPool f;
  f.pool = std::make_unique<rt::KVPool>(o);
  for (int64_t kind = 0; kind < 2; ++kind) f.pool->storage(kind).normal_();
  // Pages in a shuffled order, as a long-lived pool hands them out.
  const at::Tensor pages = at::randperm(o.num_pages - 1, at::kLong);
  const at::Tensor t = at::arange(tokens, at::kLong);
  f.slots = pages.index_select(0, t.div(page_size, "floor")) * page_size + t.remainder(page_size);
  return f;
}

// Random content (k, v) per layer for `n` tokens on the model's device and dtype.
inline rt::Content random_content(const rt::Model& m, int64_t n) {
  const rt::ModelConfig& c = m.config();
  const auto opts = at::TensorOptions().device(m.device()).dtype(m.dtype());
  rt::Content out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    out.push_back({at::randn({n, c.content_k_shape().heads, c.content_k_shape().dim}, opts),
                   at::randn({n, c.content_v_shape().heads, c.content_v_shape().dim}, opts)});
  }
  return out;
}

// n deterministic token ids spread over [3, vocab) (every bench arm and peer script uses the same ones).
inline std::vector<int64_t> tokens(int64_t n, int64_t vocab) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 3 + (i * 7919) % (vocab - 3);
  return t;
}

// The tokens `t` at positions start, start + 1, ...
inline rt::ForwardInput input_at(const std::vector<int64_t>& t, int64_t start) {
  rt::ForwardInput in;
  in.tokens = t;
  in.positions = at::arange(start, start + static_cast<int64_t>(t.size()), at::kLong);
  return in;
}

}  // namespace orbit::bench_gpu

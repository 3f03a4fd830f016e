// The prefix-cache yardsticks (planner/prefix_cache.h) in Python: what SGLang's radix cache and vLLM's
// automatic prefix caching would forward for a sequence of model reads. The samples state their savings
// against these, the same implementation `orbit replay` runs.
#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"
#include "orbit/planner/prefix_cache.h"

namespace orbit_py {

namespace {

// `what` names the class in errors ("RadixCache: capacity_tokens: expected int, got bool").
orbit::planner::PrefixCacheOptions options(const IntArg& capacity_tokens, const IntArg& block_tokens,
                                           const std::string& what) {
  orbit::planner::PrefixCacheOptions o;
  o.capacity_tokens = capacity_tokens.get((what + ": capacity_tokens").c_str());
  o.block_tokens = block_tokens.get((what + ": block_tokens").c_str());
  return o;
}

// `what` names the call in errors ("RadixCache.read: prompt[0]: expected int, got bool").
template <class Cache>
int64_t read(Cache& cache, const py::object& prompt_in, const py::object& generated_in, const std::string& what) {
  std::vector<int64_t> tokens = to_tokens(prompt_in, (what + ": prompt").c_str());
  const std::size_t prompt_size = tokens.size();
  const std::vector<int64_t> generated = to_tokens(generated_in, (what + ": generated").c_str());
  tokens.insert(tokens.end(), generated.begin(), generated.end());
  return cache.read(tokens, prompt_size).forwarded;
}

}  // namespace

void init_yardstick(py::module_& m) {
  py::class_<orbit::planner::RadixCache>(m, "RadixCache", R"(SGLang's radix cache at token granularity.

Each read reuses the longest held prefix of its prompt and forwards the rest; it then holds the whole read,
generated tokens included. capacity_tokens bounds the KV it holds (least recently used tokens leave
first); 0 = unbounded.)")
      .def(py::init([](const IntArg& capacity_tokens) {
             return orbit::planner::RadixCache(options(capacity_tokens, IntArg{py::int_(16)}, "RadixCache"));
           }),
           py::arg("capacity_tokens") = 0)
      .def(
          "read",
          [](orbit::planner::RadixCache& c, const py::object& prompt, const py::object& generated) {
            return read(c, prompt, generated, "RadixCache.read");
          },
          py::arg("prompt"), py::arg("generated") = py::list(),
          "One model call: the prompt's tokens (window, then query) and the tokens it generated. Returns the "
          "prompt tokens a radix cache forwards for it: those after the longest prefix it holds, and at least the "
          "prompt's last one, whose logits the call needs (as orbit's Generation.prompt_forward_tokens).")
      .def_property_readonly("size", &orbit::planner::RadixCache::size, "tokens held");
  py::class_<orbit::planner::BlockPrefixCache>(m, "BlockPrefixCache", R"(vLLM's automatic prefix caching.

Hash-chained blocks of block_tokens (16); only full blocks are held and reused. capacity_tokens as for
RadixCache.)")
      .def(py::init([](const IntArg& capacity_tokens, const IntArg& block_tokens) {
             return orbit::planner::BlockPrefixCache(options(capacity_tokens, block_tokens, "BlockPrefixCache"));
           }),
           py::arg("capacity_tokens") = 0, py::arg("block_tokens") = 16)
      .def(
          "read",
          [](orbit::planner::BlockPrefixCache& c, const py::object& prompt, const py::object& generated) {
            return read(c, prompt, generated, "BlockPrefixCache.read");
          },
          py::arg("prompt"), py::arg("generated") = py::list(), "As RadixCache.read, in whole blocks.")
      .def_property_readonly("size", &orbit::planner::BlockPrefixCache::size, "tokens held");
}

}  // namespace orbit_py

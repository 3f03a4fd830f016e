// Compiled constraints kept by what they were built from, so a schema or tools that come back (an agent's
// loop sends the same ones every step) are compiled, checked and have their token masks computed once.
// Compiling can cost far more than a step: zod's hostname pattern (a lookahead beside format "hostname")
// takes about 140 ms to compile (a first 8-token Python generate under it about 150 ms on stories260K, a
// repeated one 1.5 ms: bench/constrain/bench_schema_cache.py).
//
//   orbit::ConstraintCache& cache = engine->constraint_cache();   // or a ConstraintCache of one's own
//   orbit::GenerateOptions o;
//   o.constraint = cache.json_schema(schema_text);   // compiled on the first call; later ones return it
//
// A keyed LRU bounded by entries (max_entries) and by bytes (max_bytes), counting all it holds: each entry's
// key (twice: the map's and the order's), its nodes, what the caller says its value holds beside the
// constraint (Remembered::other_bytes), and its constraint's grammar and masks (Constraint::memory_bytes).
// Masks grow while answers decode, so the bytes are recounted at every lookup and by stats(), dropping
// least recently used entries until both bounds hold; between two counts running answers may add masks (at
// most 64 MiB per constraint). The entry a lookup just used is never dropped (a dropped constraint lives on
// in whoever holds it). max_entries 0 keeps nothing: every lookup builds.
//
// json_schema() and tool_calls() key an entry by everything that changes the grammar (the text, the limits,
// the call options); `path` only names errors and is not part of it. A build that throws keeps nothing: the
// next call builds, and throws, again. remembered() keeps what a caller builds around a constraint (a
// server's refusal, a binding's read-back flags) under the caller's own key; `orbit serve` keeps its answers'
// constraints in one (cli/serve/run/answer_constraint.h), Python's Window.generate in its engine's.
//
// Thread-safety: every member may be called from any thread. A build runs outside the lock, so two threads
// that miss the same key at once both build (both counted in misses); the first to finish is kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <typeindex>
#include <typeinfo>
#include <unordered_map>
#include <utility>

#include "orbit/constraint.h"

namespace orbit {

struct ConstraintCacheOptions {
  std::size_t max_bytes = std::size_t{256} << 20;  // all an entry holds, its masks included
  std::size_t max_entries = 64;                    // 0: nothing is kept
};

struct ConstraintCacheStats {
  int64_t entries = 0;
  int64_t bytes = 0;   // recounted now (entries past the bounds dropped first)
  int64_t hits = 0;    // lookups that found their key
  int64_t misses = 0;  // lookups that built (those whose build threw too)
  int64_t max_entries = 0;
  int64_t max_bytes = 0;
};

// What a caller keeps under its key: a value, the constraint in it (null for none; counted as it grows) and
// the bytes the value holds beside that constraint (its strings' capacities, say).
template <class Value>
struct Remembered {
  Value value;
  std::shared_ptr<const Constraint> constraint;
  std::size_t other_bytes = 0;
};

class ConstraintCache {
 public:
  explicit ConstraintCache(ConstraintCacheOptions options = {});
  ~ConstraintCache();
  ConstraintCache(const ConstraintCache&) = delete;
  ConstraintCache& operator=(const ConstraintCache&) = delete;

  // Constraint::json_schema(schema_json, limits, path), kept by schema text and limits (the same text,
  // byte for byte: a schema written with other spacing or key order is another entry).
  std::shared_ptr<const Constraint> json_schema(std::string_view schema_json, const ConstraintLimits& limits = {},
                                                std::string_view path = "schema");
  // Constraint::tool_calls(tools_json, options), kept by tools text and every field of options.
  std::shared_ptr<const Constraint> tool_calls(std::string_view tools_json, const ToolCallOptions& options = {});

  // The value kept under `key`, else make()'s value, kept. A key is one Value type's: looking one up as
  // another type throws orbit::Error. What make() throws propagates and nothing is kept.
  template <class Value>
  Value remembered(const std::string& key, const std::function<Remembered<Value>()>& make) {
    const std::shared_ptr<const void> held = find_or_build(key, typeid(Value), [&] {
      Remembered<Value> r = make();
      return Erased{std::make_shared<const Value>(std::move(r.value)), std::move(r.constraint), r.other_bytes};
    });
    return *std::static_pointer_cast<const Value>(held);
  }

  ConstraintCacheStats stats();
  const ConstraintCacheOptions& options() const { return options_; }

 private:
  struct Erased {
    std::shared_ptr<const void> value;
    std::shared_ptr<const Constraint> constraint;
    std::size_t other_bytes = 0;
  };
  struct Kept {
    Erased held;
    std::type_index type;
    std::list<std::string>::iterator at;
    std::size_t fixed = 0;  // bytes apart from the constraint's (which grow): key, nodes, other_bytes
  };
  std::shared_ptr<const void> find_or_build(const std::string& key, std::type_index type,
                                            const std::function<Erased()>& build);
  static std::size_t held_bytes(const Kept& kept);
  // Recounts and drops least recently used entries (never the most recent) until both bounds hold; the bytes
  // then held. Requires mu_.
  std::size_t trim_locked();

  ConstraintCacheOptions options_;
  std::mutex mu_;
  std::list<std::string> order_;  // keys, most recently used first
  std::unordered_map<std::string, Kept> kept_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

}  // namespace orbit

#include "orbit/constraint_cache.h"

#include <algorithm>

#include "orbit/common/error.h"

namespace orbit {

namespace {

// Parts joined so that no two lists of parts give the same key: each part is its length, ':', its bytes.
void append_part(std::string& key, std::string_view part) {
  key += std::to_string(part.size());
  key += ':';
  key += part;
}

void append_limits(std::string& key, const ConstraintLimits& l) {
  append_part(key, std::to_string(l.max_string_chars) + "," + std::to_string(l.max_number_chars) + "," +
                       std::to_string(l.max_array_items) + "," + std::to_string(l.max_object_members) + "," +
                       std::to_string(l.max_depth) + "," + std::to_string(static_cast<int>(l.whitespace)));
}

}  // namespace

ConstraintCache::ConstraintCache(ConstraintCacheOptions options) : options_(options) {}
ConstraintCache::~ConstraintCache() = default;

std::shared_ptr<const Constraint> ConstraintCache::json_schema(std::string_view schema_json,
                                                               const ConstraintLimits& limits, std::string_view path) {
  std::string key = "json_schema\n";
  append_limits(key, limits);
  append_part(key, schema_json);
  return remembered<std::shared_ptr<const Constraint>>(key, [&] {
    auto c = Constraint::json_schema(schema_json, limits, path);
    return Remembered<std::shared_ptr<const Constraint>>{c, c, 0};
  });
}

std::shared_ptr<const Constraint> ConstraintCache::tool_calls(std::string_view tools_json,
                                                              const ToolCallOptions& options) {
  std::string key = "tool_calls\n";
  for (const std::string* part :
       {&options.begin, &options.end, &options.name_key, &options.arguments_key, &options.only, &options.separator}) {
    append_part(key, *part);
  }
  append_part(key, std::to_string(options.max_calls));
  append_limits(key, options.limits);
  append_part(key, tools_json);
  return remembered<std::shared_ptr<const Constraint>>(key, [&] {
    auto c = Constraint::tool_calls(tools_json, options);
    return Remembered<std::shared_ptr<const Constraint>>{c, c, 0};
  });
}

std::shared_ptr<const void> ConstraintCache::find_or_build(const std::string& key, std::type_index type,
                                                           const std::function<Erased()>& build) {
  const auto check_type = [&](const Kept& kept) {
    ORBIT_CHECK(kept.type == type,
                "ConstraintCache: the key '" << key.substr(0, 60) << "' is kept as another type of value");
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = kept_.find(key);
    if (it != kept_.end()) {
      check_type(it->second);
      ++hits_;
      order_.splice(order_.begin(), order_, it->second.at);
      trim_locked();  // its masks, and others', grew since the last count
      return it->second.held.value;
    }
    ++misses_;
  }
  Erased built = build();
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = kept_.find(key);
  if (it != kept_.end()) {  // another thread built it meanwhile: the first kept stays
    check_type(it->second);
  } else if (options_.max_entries > 0) {
    // The map's node (its pair, a next pointer, the cached hash, a bucket) and the order's (two links).
    constexpr std::size_t kNodes =
        sizeof(std::pair<const std::string, Kept>) + 3 * sizeof(void*) + sizeof(std::string) + 2 * sizeof(void*);
    order_.push_front(key);
    const std::size_t fixed = kNodes + 2 * key.capacity() + built.other_bytes;
    kept_.emplace(key, Kept{built, type, order_.begin(), fixed});
    trim_locked();
  }
  return built.value;
}

std::size_t ConstraintCache::held_bytes(const Kept& kept) {
  return kept.fixed + (kept.held.constraint ? kept.held.constraint->memory_bytes() : 0);
}

std::size_t ConstraintCache::trim_locked() {
  std::size_t total = 0;
  for (const auto& entry : kept_) total += held_bytes(entry.second);
  while (order_.size() > 1 && (total > options_.max_bytes || order_.size() > options_.max_entries)) {
    const auto it = kept_.find(order_.back());
    total -= std::min(total, held_bytes(it->second));
    kept_.erase(it);
    order_.pop_back();
  }
  return total;
}

ConstraintCacheStats ConstraintCache::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  ConstraintCacheStats s;
  s.bytes = static_cast<int64_t>(trim_locked());
  s.entries = static_cast<int64_t>(kept_.size());
  s.hits = hits_;
  s.misses = misses_;
  s.max_entries = static_cast<int64_t>(options_.max_entries);
  s.max_bytes = static_cast<int64_t>(options_.max_bytes);
  return s;
}

}  // namespace orbit

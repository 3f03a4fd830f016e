// A sorted set of strings (an object's logged keys, their saturated prefixes: key_log.h) held in a few blocks
// of bytes and one sorted array of views into them, so that freeing it (as its object closes) frees a handful of
// allocations however many strings it holds, where a std::set<std::string> of keys past the short-string size
// freed two per key; and a lookup reads one array. Ordered as std::string orders (bytes as unsigned char).
// Thread-safety: a value; const members only read.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

namespace orbit::constrain {

class KeySet {
 public:
  using const_iterator = std::vector<std::string_view>::const_iterator;

  KeySet() = default;
  KeySet(const KeySet& other);  // its strings copied into one block of its own
  KeySet& operator=(const KeySet& other);
  KeySet(KeySet&&) noexcept = default;  // a block keeps its address as it moves: the views stay good
  KeySet& operator=(KeySet&&) noexcept = default;
  ~KeySet() = default;

  // Adds `s` (copied) where the set does not hold it; returns whether it did.
  bool insert(std::string_view s);
  std::size_t count(std::string_view s) const;
  const_iterator lower_bound(std::string_view s) const;
  const_iterator upper_bound(std::string_view s) const;
  const_iterator begin() const { return sorted_.begin(); }
  const_iterator end() const { return sorted_.end(); }
  std::size_t size() const { return sorted_.size(); }
  bool empty() const { return sorted_.empty(); }
  void clear();

 private:
  // A copy of `s` in the blocks, which never move: a new block where the last has no room for it.
  std::string_view store(std::string_view s);

  std::vector<std::unique_ptr<char[]>> blocks_;
  std::size_t left_ = 0;                  // bytes free at the end of the last block
  std::size_t last_size_ = 0;             // the last block's bytes
  std::vector<std::string_view> sorted_;  // ascending, each once
};

}  // namespace orbit::constrain

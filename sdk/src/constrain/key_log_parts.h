// The helpers the key log's files share (key_log.cpp: the walk; key_log_keys.cpp: the per-object keys;
// key_log_need.cpp: the fewest bytes left; key_log_suspects.cpp: the tokens a walk may refuse). Private to
// orbit_constrain.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "constrain/matcher.h"

namespace orbit::constrain::key_log {

inline bool is_object(const Node& n) { return n.kind == NodeKind::kObject || n.kind == NodeKind::kAnyObject; }

inline bool has_few_keys(const Node& n) {
  return n.kind == NodeKind::kObject && n.open && n.extra_keys != Node::kNoKeyBound;
}

// The bytes of text + walked, read as one text.
struct Joined {
  std::string_view text, walked;
  char operator[](std::size_t i) const { return i < text.size() ? text[i] : walked[i - text.size()]; }
  // The bytes [from, to].
  std::string span(std::size_t from, std::size_t to) const {
    std::string s;
    for (std::size_t i = from; i <= to; ++i) s += (*this)[i];
    return s;
  }
  // The offset of the '"' that opens the JSON string whose bytes run through `last`: the nearest '"' at or
  // before it with an even run of backslashes before it (inside a string a '"' is always escaped).
  std::size_t opening_quote(std::size_t last) const {
    for (std::size_t q = last + 1; q-- > 0;) {
      if ((*this)[q] != '"') continue;
      std::size_t slashes = 0;
      while (slashes < q && (*this)[q - 1 - slashes] == '\\') ++slashes;
      if (slashes % 2 == 0) return q;
    }
    return 0;  // not reached: a key's bytes follow its opening quote
  }
};

// A whole key (quotes included, any spelling the grammar allows) as json_quote() writes its text.
// ASCII without a '\\' or a control byte is its own: json_quote() escapes only those.
std::string canonical(const std::string& quoted);

// One byte of a key (kString, kDfa or kLiteralSet): -1 refused, 0 the key goes on (`f` updated), 1 it is whole.
int key_byte(const Node& key, Frame& f, uint8_t c);

// Whether the key node `key` writes `quoted` (json_quote()'s spelling). The log holds an object's keys by its
// '{', so alternatives that read the same object share them, and a key one reads as free may be a declared
// name in another, where its extra keys spell no such key: counted there, it would take the place of a key
// the object may still write.
bool writes(const Node& key, const std::string& quoted);

}  // namespace orbit::constrain::key_log

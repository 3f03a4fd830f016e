// Regular expressions parsed (regex_tree.h): the ECMA-262 subset regex.h lists, to a small tree of code
// point sets, concatenations, alternations and repeats; refusals name the construct and where it is.
#include <algorithm>
#include <utility>
#include <vector>

#include "constrain/regex_tree.h"
#include "orbit/common/error.h"

namespace orbit::constrain::rx {

void CodeSet::normalize() {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const auto& r : ranges) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  ranges = std::move(out);
}

CodeSet CodeSet::complement() const {
  CodeSet out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) out.add(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.add(next, kMaxCodePoint);
  return out;
}

CodeSet any_char() {
  CodeSet s;
  s.add(0, kMaxCodePoint);
  return s;
}

namespace {

constexpr int kMaxCount = 1000;

CodeSet one(uint32_t c) {
  CodeSet s;
  s.add(c, c);
  return s;
}

CodeSet digits() {
  CodeSet s;
  s.add('0', '9');
  return s;
}

CodeSet word_chars() {
  CodeSet s;
  s.add('0', '9');
  s.add('A', 'Z');
  s.add('_', '_');
  s.add('a', 'z');
  return s;
}

// ECMA-262's white space and line terminators.
CodeSet space_chars() {
  CodeSet s;
  for (uint32_t c : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu}) s.add(c, c);
  s.add(0x09, 0x0D);
  s.add(0x2000, 0x200A);
  s.normalize();
  return s;
}

// '.': anything but a line terminator.
CodeSet dot_chars() {
  CodeSet s;
  for (uint32_t c : {0x0Au, 0x0Du, 0x2028u, 0x2029u}) s.add(c, c);
  s.normalize();
  return s.complement();
}

std::vector<uint32_t> decode_utf8(const std::string& text, const std::string& what) {
  std::vector<uint32_t> out;
  for (std::size_t i = 0; i < text.size();) {
    const auto b = static_cast<uint8_t>(text[i]);
    const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    ORBIT_CHECK(len > 0 && i + static_cast<std::size_t>(len) <= text.size(), what << ": the pattern is not UTF-8");
    uint32_t c = len == 1 ? b : (b & (0x7F >> len));
    for (int k = 1; k < len; ++k) c = (c << 6) | (static_cast<uint8_t>(text[i + static_cast<std::size_t>(k)]) & 0x3F);
    out.push_back(c);
    i += static_cast<std::size_t>(len);
  }
  return out;
}

class Parser {
 public:
  // `max_depth`: groups that may be open at once (a request's pattern recurses the parser that deep).
  Parser(const std::string& pattern, const std::string& what, int max_depth)
      : cps_(decode_utf8(pattern, what)), what_(what), max_depth_(max_depth) {}

  Rx parse() {
    Rx r = alternation();
    if (i_ < cps_.size()) fail("an unmatched ')'");
    return r;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const { fail_at(i_, message); }
  [[noreturn]] void fail_at(std::size_t at, const std::string& message) const {
    ORBIT_FAIL(what_ << ": " << message << " at character " << (at + 1) << " of the pattern");
  }
  bool at_end() const { return i_ >= cps_.size(); }
  uint32_t peek(std::size_t ahead = 0) const { return i_ + ahead < cps_.size() ? cps_[i_ + ahead] : 0xFFFFFFFF; }
  uint32_t take() {
    if (at_end()) fail("an unfinished construct");
    return cps_[i_++];
  }

  Rx alternation() {
    Rx alt;
    alt.kind = Rx::Kind::kAlt;
    alt.kids.push_back(concatenation());
    while (peek() == '|') {
      ++i_;
      alt.kids.push_back(concatenation());
    }
    return alt.kids.size() == 1 ? std::move(alt.kids.front()) : alt;
  }

  Rx concatenation() {
    Rx cat;
    cat.kind = Rx::Kind::kCat;
    while (!at_end() && peek() != '|' && peek() != ')') {
      Rx a = atom();
      quantify(a);
      cat.kids.push_back(std::move(a));
    }
    return cat;
  }

  Rx set_of(CodeSet s) {
    Rx r;
    r.kind = Rx::Kind::kSet;
    s.normalize();
    r.set = std::move(s);
    return r;
  }

  Rx anchor(Rx::Kind kind) const {
    Rx r;
    r.kind = kind;
    r.at = i_ - 1;
    return r;
  }

  Rx atom() {
    const uint32_t c = take();
    switch (c) {
      case '(': return group();
      case '[': return set_of(char_class());
      case '.': return set_of(dot_chars());
      case '^': return anchor(Rx::Kind::kBegin);
      case '$': return anchor(Rx::Kind::kEnd);
      case '\\': return set_of(escape(false));
      case '*':
      case '+':
      case '?': {
        --i_;
        fail("nothing to repeat");
      }
      case '{': {
        --i_;
        int lo = 0;
        int hi = 0;
        if (counts(lo, hi)) fail("nothing to repeat");
        ++i_;
        return set_of(one('{'));
      }
      default: return set_of(one(c));
    }
  }

  Rx group() {
    const std::size_t open = i_ - 1;
    if (++depth_ > max_depth_) fail_at(open, "groups nested deeper than " + std::to_string(max_depth_));
    bool look = false;
    bool negative = false;
    if (peek() == '?') {
      ++i_;
      const uint32_t k = take();
      look = k == '=' || k == '!';
      negative = k == '!';
      if (k == '<' && (peek() == '=' || peek() == '!')) fail_at(open, "lookbehind is not supported");
      if (k == '<') {
        while (!at_end() && peek() != '>') ++i_;
        take();
      } else if (k != ':' && !look) {
        fail_at(open, "this group syntax is not supported");
      }
    }
    Rx inner = alternation();
    if (at_end()) fail_at(open, "a missing ')'");
    ++i_;
    --depth_;
    if (!look) return inner;
    Rx r;
    r.kind = Rx::Kind::kLook;
    r.negative = negative;
    r.at = open;
    r.kids.push_back(std::move(inner));
    return r;
  }

  // Parses {n}, {n,} or {n,m} at the cursor without moving it; false when it is not one.
  bool counts(int& lo, int& hi) const {
    std::size_t j = i_ + 1;
    const auto number = [&](int& out) {
      const std::size_t from = j;
      long value = 0;
      while (j < cps_.size() && cps_[j] >= '0' && cps_[j] <= '9')
        value = std::min<long>(value * 10 + (cps_[j++] - '0'), 1L << 30);
      out = static_cast<int>(value);
      return j > from;
    };
    if (!number(lo)) return false;
    hi = lo;
    if (j < cps_.size() && cps_[j] == ',') {
      ++j;
      if (!number(hi)) hi = -1;
    }
    return j < cps_.size() && cps_[j] == '}';
  }

  void quantify(Rx& a) {
    int lo = 0;
    int hi = 0;
    if (peek() == '*') {
      hi = -1;
    } else if (peek() == '+') {
      lo = 1, hi = -1;
    } else if (peek() == '?') {
      hi = 1;
    } else if (peek() == '{' && counts(lo, hi)) {
      if (std::max(lo, hi) > kMaxCount) fail("a count over " + std::to_string(kMaxCount));
      if (hi >= 0 && hi < lo) fail("a count range out of order");
      while (peek() != '}') ++i_;
    } else {
      return;
    }
    ++i_;
    if (peek() == '?') ++i_;  // lazy: the same language
    if (a.kind == Rx::Kind::kBegin || a.kind == Rx::Kind::kEnd) fail("an anchor cannot be repeated");
    if (peek() == '*' || peek() == '+' || peek() == '?') fail("nothing to repeat");
    Rx r;
    r.kind = Rx::Kind::kRepeat;
    r.min = lo;
    r.max = hi;
    r.kids.push_back(std::move(a));
    a = std::move(r);
  }

  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      const uint32_t h = take();
      const int d = h >= '0' && h <= '9'   ? static_cast<int>(h - '0')
                    : h >= 'a' && h <= 'f' ? static_cast<int>(h - 'a' + 10)
                    : h >= 'A' && h <= 'F' ? static_cast<int>(h - 'A' + 10)
                                           : -1;
      if (d < 0) fail("a malformed hex escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  // After a '\'. In a class, \b is a backspace.
  CodeSet escape(bool in_class) {
    const uint32_t c = take();
    switch (c) {
      case 'd': return digits();
      case 'D': return digits().complement();
      case 'w': return word_chars();
      case 'W': return word_chars().complement();
      case 's': return space_chars();
      case 'S': return space_chars().complement();
      case 't': return one('\t');
      case 'n': return one('\n');
      case 'v': return one('\v');
      case 'f': return one('\f');
      case 'r': return one('\r');
      case 'x': return one(hex(2));
      case 'u': return one(hex(4));
      case 'b':
        if (in_class) return one('\b');
        fail("a word boundary (\\b) is not supported");
      case 'B': fail("a word boundary (\\B) is not supported");
      case 'c': fail("a control escape (\\c) is not supported");
      case 'p':
      case 'P': fail("a Unicode property class (\\p) is not supported");
      case 'k': fail("a named backreference is not supported");
      case '0':
        if (peek() < '0' || peek() > '9') return one(0);
        fail("an octal escape is not supported");
      default:
        if (c >= '1' && c <= '9') fail("a backreference is not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) fail("an unknown escape");
        return one(c);
    }
  }

  CodeSet char_class() {
    CodeSet s;
    const bool negate = peek() == '^';
    if (negate) ++i_;
    while (peek() != ']') {
      if (at_end()) fail("a missing ']'");
      uint32_t lo = 0;
      if (!class_atom(s, lo)) continue;
      if (peek() == '-' && peek(1) != ']' && peek(1) != 0xFFFFFFFF) {
        ++i_;
        uint32_t hi = 0;
        CodeSet ignored;
        if (!class_atom(ignored, hi)) fail("a class (\\d, \\w, \\s) as the end of a range");
        if (hi < lo) fail("a range out of order");
        s.add(lo, hi);
      } else {
        s.add(lo, lo);
      }
    }
    ++i_;
    s.normalize();
    return negate ? s.complement() : s;
  }

  // One class member: false when it was a class escape (added to `s`), true with `c` set otherwise.
  bool class_atom(CodeSet& s, uint32_t& c) {
    c = take();
    if (c != '\\') return true;
    const uint32_t e = peek();
    const CodeSet set = escape(true);
    if (e == 'd' || e == 'D' || e == 'w' || e == 'W' || e == 's' || e == 'S') {
      s.add(set);
      return false;
    }
    c = set.ranges.front().first;
    return true;
  }

  std::vector<uint32_t> cps_;
  std::string what_;
  int max_depth_ = 0;
  std::size_t i_ = 0;
  int depth_ = 0;  // groups open
};

}  // namespace

Rx parse(const std::string& pattern, const std::string& what, int max_depth) {
  return Parser(pattern, what, max_depth).parse();
}

}  // namespace orbit::constrain::rx

// Regular expressions to byte NFAs (regex.h): a parser to a small tree, then a Thompson construction whose
// character sets are written as the bytes a JSON string (or plain ASCII) uses for them.
#include "constrain/regex.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "orbit/common/error.h"

namespace orbit::constrain {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxCount = 1000;
constexpr std::size_t kMaxNfaStates = 400000;

// Code points as sorted, disjoint, non-adjacent ranges.
struct CodeSet {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;

  void add(uint32_t lo, uint32_t hi) { ranges.emplace_back(lo, hi); }
  void add(const CodeSet& other) { ranges.insert(ranges.end(), other.ranges.begin(), other.ranges.end()); }
  void normalize() {
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
  CodeSet complement() const {
    CodeSet out;
    uint32_t next = 0;
    for (const auto& [lo, hi] : ranges) {
      if (lo > next) out.add(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) out.add(next, kMaxCodePoint);
    return out;
  }
};

CodeSet one(uint32_t c) {
  CodeSet s;
  s.add(c, c);
  return s;
}

CodeSet any_char() {
  CodeSet s;
  s.add(0, kMaxCodePoint);
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

struct Rx {
  enum class Kind { kEmpty, kSet, kCat, kAlt, kRepeat, kBegin, kEnd };
  Kind kind = Kind::kEmpty;
  CodeSet set;
  std::vector<Rx> kids;
  int min = 0;
  int max = 0;  // -1: no bound
};

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

  Rx atom() {
    const uint32_t c = take();
    switch (c) {
      case '(': return group();
      case '[': return set_of(char_class());
      case '.': return set_of(dot_chars());
      case '^': return Rx{Rx::Kind::kBegin, {}, {}, 0, 0};
      case '$': return Rx{Rx::Kind::kEnd, {}, {}, 0, 0};
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
    if (peek() == '?') {
      ++i_;
      const uint32_t k = take();
      if (k == '=' || k == '!') fail_at(open, "lookahead is not supported");
      if (k == '<' && (peek() == '=' || peek() == '!')) fail_at(open, "lookbehind is not supported");
      if (k == '<') {
        while (!at_end() && peek() != '>') ++i_;
        take();
      } else if (k != ':') {
        fail_at(open, "this group syntax is not supported");
      }
    }
    Rx inner = alternation();
    if (at_end()) fail_at(open, "a missing ')'");
    ++i_;
    --depth_;
    return inner;
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

struct Frag {
  int32_t start = 0;
  int32_t end = 0;
};

// UTF-8 sequences of [lo, hi] (one encoded length, no surrogates) as per-byte ranges, split so that each
// sequence's byte ranges combine freely.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  if (lo > hi) return;
  for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= edge && edge < hi) {
      utf8_sequences(lo, edge, out);
      utf8_sequences(edge + 1, hi, out);
      return;
    }
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      utf8_sequences(lo, lo | m, out);
      utf8_sequences((lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      utf8_sequences(lo, (hi & ~m) - 1, out);
      utf8_sequences(hi & ~m, hi, out);
      return;
    }
  }
  const auto encode = [](uint32_t c) {
    std::vector<uint8_t> b;
    if (c < 0x80) return std::vector<uint8_t>{static_cast<uint8_t>(c)};
    if (c < 0x800)
      return std::vector<uint8_t>{static_cast<uint8_t>(0xC0 | (c >> 6)), static_cast<uint8_t>(0x80 | (c & 0x3F))};
    if (c < 0x10000) {
      return std::vector<uint8_t>{static_cast<uint8_t>(0xE0 | (c >> 12)),
                                  static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F)),
                                  static_cast<uint8_t>(0x80 | (c & 0x3F))};
    }
    return std::vector<uint8_t>{static_cast<uint8_t>(0xF0 | (c >> 18)), static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F)),
                                static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F)),
                                static_cast<uint8_t>(0x80 | (c & 0x3F))};
  };
  const std::vector<uint8_t> a = encode(lo);
  const std::vector<uint8_t> b = encode(hi);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (std::size_t k = 0; k < a.size(); ++k) seq.emplace_back(a[k], b[k]);
  out.push_back(std::move(seq));
}

class Builder {
 public:
  Builder(ByteNfa& nfa, RegexText text, const std::string& what) : nfa_(nfa), text_(text), what_(what) {}

  Frag build(const Rx& r) {
    ORBIT_CHECK(nfa_.states.size() < kMaxNfaStates, what_ << ": the pattern is too complex to constrain");
    switch (r.kind) {
      case Rx::Kind::kSet: return set(r.set);
      case Rx::Kind::kCat: {
        Frag f = empty();
        for (const Rx& k : r.kids) f = then(f, build(k));
        return f;
      }
      case Rx::Kind::kAlt: {
        Frag f{nfa_.add(), nfa_.add()};
        for (const Rx& k : r.kids) {
          const Frag g = build(k);
          nfa_.empty(f.start, g.start);
          nfa_.empty(g.end, f.end);
        }
        return f;
      }
      case Rx::Kind::kRepeat: return repeat(r);
      case Rx::Kind::kBegin:
      case Rx::Kind::kEnd:
        ORBIT_FAIL(what_ << ": '^' and '$' are supported only at the start and end of the pattern "
                         << "or of a top-level alternative");
      case Rx::Kind::kEmpty: break;
    }
    return empty();
  }

  Frag empty() {
    const int32_t s = nfa_.add();
    return {s, s};
  }

  Frag then(Frag a, Frag b) {
    nfa_.empty(a.end, b.start);
    return {a.start, b.end};
  }

  Frag star(const Rx& r) {
    const Frag f = build(r);
    Frag out{nfa_.add(), nfa_.add()};
    nfa_.empty(out.start, f.start);
    nfa_.empty(out.start, out.end);
    nfa_.empty(f.end, f.start);
    nfa_.empty(f.end, out.end);
    return out;
  }

  Frag set(const CodeSet& s) {
    Frag f{nfa_.add(), nfa_.add()};
    for (auto [lo, hi] : s.ranges) {
      if (text_ == RegexText::kAscii) {
        ORBIT_CHECK(hi < 0x80, what_ << ": only ASCII characters can be written here");
        nfa_.edge(f.start, static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), f.end);
        continue;
      }
      for (uint32_t c = lo; c <= std::min(hi, 0x7Fu); ++c) ascii(c, f);
      const uint32_t from = std::max(lo, 0x80u);
      if (from > hi) continue;
      std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
      // The surrogates are not characters.
      utf8_sequences(from, std::min(hi, 0xD7FFu), seqs);
      utf8_sequences(std::max(from, 0xE000u), hi, seqs);
      for (const auto& seq : seqs) path(f, seq);
    }
    return f;
  }

 private:
  Frag repeat(const Rx& r) {
    Frag f = empty();
    for (int k = 0; k < r.min; ++k) f = then(f, build(r.kids.front()));
    if (r.max < 0) return then(f, star(r.kids.front()));
    const int32_t end = nfa_.add();
    for (int k = r.min; k < r.max; ++k) {
      nfa_.empty(f.end, end);
      f = then(f, build(r.kids.front()));
    }
    nfa_.empty(f.end, end);
    return {f.start, end};
  }

  // One byte sequence from f.start to f.end; the states between are inside the character.
  void path(const Frag& f, const std::vector<std::pair<uint8_t, uint8_t>>& seq) {
    int32_t at = f.start;
    for (std::size_t k = 0; k < seq.size(); ++k) {
      const int32_t to = k + 1 == seq.size() ? f.end : nfa_.add(true);
      nfa_.edge(at, seq[k].first, seq[k].second, to);
      at = to;
    }
  }

  // An ASCII character as a JSON string writes it.
  void ascii(uint32_t c, const Frag& f) {
    const auto b = static_cast<uint8_t>(c);
    if (c >= 0x20 && c != '"' && c != '\\') {
      nfa_.edge(f.start, b, b, f.end);
      return;
    }
    const auto lit = [](char x) { return std::make_pair(static_cast<uint8_t>(x), static_cast<uint8_t>(x)); };
    const char* shorts = "\b\f\n\r\t\"\\";
    const char* letters = "bfnrt\"\\";
    for (int k = 0; shorts[k] != 0; ++k) {
      if (static_cast<char>(c) == shorts[k]) return path(f, {lit('\\'), lit(letters[k])});
    }
    const char* hexdigits = "0123456789abcdef";
    const char low = hexdigits[c & 15];
    const std::vector<std::pair<uint8_t, uint8_t>> head{lit('\\'), lit('u'), lit('0'), lit('0'),
                                                        lit(hexdigits[c >> 4])};
    std::vector<std::pair<uint8_t, uint8_t>> seq = head;
    seq.push_back(lit(low));
    path(f, seq);
    if (low >= 'a') {
      seq.back() = lit(static_cast<char>(low - 'a' + 'A'));
      path(f, seq);
    }
  }

  ByteNfa& nfa_;
  RegexText text_;
  const std::string& what_;
};

// One top-level alternative: its leading '^' and trailing '$' taken off, and the rest built, with any
// characters before and after it unless anchored (kSearch).
Frag top_branch(Builder& b, Rx branch, RegexSyntax syntax) {
  if (branch.kind != Rx::Kind::kCat) {
    Rx cat;
    cat.kind = Rx::Kind::kCat;
    cat.kids.push_back(std::move(branch));
    branch = std::move(cat);
  }
  std::vector<Rx>& kids = branch.kids;
  const bool begins = !kids.empty() && kids.front().kind == Rx::Kind::kBegin;
  if (begins) kids.erase(kids.begin());
  const bool ends = !kids.empty() && kids.back().kind == Rx::Kind::kEnd;
  if (ends) kids.pop_back();
  Rx any;
  any.kind = Rx::Kind::kSet;
  any.set = any_char();
  Frag f = b.empty();
  if (syntax == RegexSyntax::kSearch && !begins) f = b.then(f, b.star(any));
  f = b.then(f, b.build(branch));  // an anchor left inside throws, naming where anchors may go
  if (syntax == RegexSyntax::kSearch && !ends) f = b.then(f, b.star(any));
  return f;
}

}  // namespace

ByteNfa regex_nfa(const std::string& pattern, RegexSyntax syntax, RegexText text, const std::string& what) {
  // A schema's own pattern nests at most 100 groups; orbit's number languages nest one per digit of a bound.
  Rx root = Parser(pattern, what, syntax == RegexSyntax::kSearch ? 100 : 2000).parse();
  std::vector<Rx> branches;
  if (root.kind == Rx::Kind::kAlt) {
    branches = std::move(root.kids);
  } else {
    branches.push_back(std::move(root));
  }
  ByteNfa nfa;
  Builder b(nfa, text, what);
  nfa.start = nfa.add();
  nfa.accept = nfa.add();
  for (Rx& branch : branches) {
    const Frag f = top_branch(b, std::move(branch), syntax);
    nfa.empty(nfa.start, f.start);
    nfa.empty(f.end, nfa.accept);
  }
  return nfa;
}

ByteDfa regex_dfa(const std::string& pattern, RegexSyntax syntax, RegexText text, const std::string& what) {
  return determinize(regex_nfa(pattern, syntax, text, what), what);
}

}  // namespace orbit::constrain

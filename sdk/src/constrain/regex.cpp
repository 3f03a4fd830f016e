// Regular expressions to byte NFAs (regex.h): the parsed tree (regex_tree.h) built by a Thompson construction
// whose character sets are written as the bytes a JSON string (or plain ASCII) uses for them.
#include "constrain/regex.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "constrain/regex_tree.h"
#include "orbit/common/error.h"

namespace orbit::constrain {

namespace {

using rx::CodeSet;
using rx::Rx;

constexpr std::size_t kMaxNfaStates = 100000;  // bounds memory too: a state holds vectors

// A piece of the NFA under construction: enter at start, leave at end.
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
  any.set = rx::any_char();
  Frag f = b.empty();
  if (syntax == RegexSyntax::kSearch && !begins) f = b.then(f, b.star(any));
  f = b.then(f, b.build(branch));  // an anchor left inside throws, naming where anchors may go
  if (syntax == RegexSyntax::kSearch && !ends) f = b.then(f, b.star(any));
  return f;
}

}  // namespace

ByteNfa regex_nfa(const std::string& pattern, RegexSyntax syntax, RegexText text, const std::string& what) {
  // A schema's own pattern nests at most 100 groups; orbit's number languages nest one per digit of a bound.
  Rx root = rx::parse(pattern, what, syntax == RegexSyntax::kSearch ? 100 : 2000);
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

// Regular expressions to byte NFAs (regex.h): the parsed tree (regex_tree.h) built by a Thompson construction
// whose character sets are written as the bytes a JSON string (or plain ASCII) uses for them.
#include "constrain/regex.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "constrain/dfa_memo.h"
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

// Lookaheads a pattern may hold (each is an automaton of its own, built once however often it repeats).
constexpr int kMaxLookaheads = 32;

// What the automata a pattern's lookaheads need have cost so far: their count, and the work their
// determinizations share (byte_dfa.h's bound holds for them together).
struct LookBudget {
  int lookaheads = 0;
  std::size_t work = 0;
};

class Builder {
 public:
  // `budget`: shared with the builders of nested lookaheads.
  Builder(ByteNfa& nfa, RegexText text, const std::string& what, LookBudget& budget)
      : nfa_(nfa), text_(text), what_(what), budget_(budget) {}

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
      case Rx::Kind::kLook: return assertion(look(r));
      case Rx::Kind::kEnd: return assertion(end());
      case Rx::Kind::kBegin:
        ORBIT_FAIL(what_ << ": '^' is supported only at the start of the pattern or of a top-level alternative, "
                         << "not at character " << (r.at + 1) << " of the pattern");
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

  Frag star(const Rx& r) { return star(build(r)); }

  Frag star(const CodeSet& s) { return star(set(s)); }

  Frag star(Frag f) {
    Frag out{nfa_.add(), nfa_.add()};
    nfa_.empty(out.start, f.start);
    nfa_.empty(out.start, out.end);
    nfa_.empty(f.end, f.start);
    nfa_.empty(f.end, out.end);
    return out;
  }

  // A top-level alternative (after its '^') whose first `looks` kids are lookaheads: the rest of it (and any
  // characters after it unless `ends`) made an automaton of its own, intersected with each positive
  // lookahead's rests and stripped of each negative one's, as a fragment. Exact (from where the match starts,
  // the lookaheads and the fragment both read the rest of the text), and cheaper than running them as threads.
  Frag looking(const std::vector<Rx>& kids, std::size_t looks, bool ends) {
    ByteNfa sub;
    Builder inner(sub, text_, what_, budget_);
    Frag f = inner.empty();
    for (std::size_t k = looks; k < kids.size(); ++k) f = inner.then(f, inner.build(kids[k]));
    if (!ends) f = inner.then(f, inner.star(rx::any_char()));
    sub.start = f.start;
    sub.accept = f.end;
    std::optional<ByteDfa> dfa = determinize_or_empty(sub, what_, &budget_.work);
    for (std::size_t k = 0; k < looks && dfa; ++k) {
      std::optional<ByteDfa> rest = look_rest(kids[k]);
      if (!kids[k].negative) {
        dfa = rest ? intersect_or_empty(*dfa, *rest, what_) : std::nullopt;
      } else if (rest) {
        dfa = subtract(*dfa, *rest, what_);
      }
    }
    return dfa ? embed(*dfa) : Frag{nfa_.add(), nfa_.add()};
  }

  // A DFA's states and edges copied in, its accepting states leading to the fragment's end.
  Frag embed(const ByteDfa& d) {
    std::vector<int32_t> ids;
    for (std::size_t s = 0; s < d.size(); ++s) ids.push_back(nfa_.add(d.char_end[s] == 0));
    ORBIT_CHECK(nfa_.states.size() < kMaxNfaStates, what_ << ": the pattern is too complex to constrain");
    const Frag f{ids[0], nfa_.add()};
    for (std::size_t s = 0; s < d.size(); ++s) {
      for (const ByteDfa::Edge& e : d.edges[s]) nfa_.edge(ids[s], e.lo, e.hi, ids[static_cast<std::size_t>(e.to)]);
      if (d.accepting[s]) nfa_.empty(ids[s], f.end);
    }
    return f;
  }

  Frag set(const CodeSet& s) {
    Frag f{nfa_.add(), nfa_.add()};
    Escapes escapes;
    for (auto [lo, hi] : s.ranges) {
      if (text_ == RegexText::kAscii) {
        ORBIT_CHECK(hi < 0x80, what_ << ": only ASCII characters can be written here");
        nfa_.edge(f.start, static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), f.end);
        continue;
      }
      if (lo < 0x80) ascii(lo, std::min(hi, 0x7Fu), f, escapes);
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
  static constexpr int32_t kAlways = -1;  // an assertion that always holds
  static constexpr int32_t kNever = -2;   // one that never does

  // An empty move under assertions[id] (or kAlways, kNever).
  Frag assertion(int32_t id) {
    Frag f{nfa_.add(), nfa_.add()};
    if (id == kAlways) nfa_.empty(f.start, f.end);
    if (id >= 0) nfa_.asserted(f.start, id, f.end);
    return f;
  }

  int32_t add_assertion(std::optional<ByteDfa> rest, bool negative) {
    if (!rest) return negative ? kAlways : kNever;
    nfa_.assertions.push_back({std::make_shared<const ByteDfa>(std::move(*rest)), negative});
    return static_cast<int32_t>(nfa_.assertions.size()) - 1;
  }

  // '$': the rest of the text is empty.
  int32_t end() {
    if (end_ == kNone) {
      ByteNfa empty;
      empty.start = empty.accept = empty.add();
      end_ = add_assertion(determinize_or_empty(empty, what_), false);
    }
    return end_;
  }

  // A lookahead's assertion, built once per node however often a repeat builds the node.
  int32_t look(const Rx& r) {
    const auto found = looks_.find(r.at);
    if (found != looks_.end()) return found->second;
    const int32_t id = add_assertion(look_rest(r), r.negative);
    looks_.emplace(r.at, id);
    return id;
  }

  // A lookahead's language of rests: its X followed by any bytes, X's '$' the end of the whole text (a '$'
  // ending one of X's alternatives leaves no bytes after it; one elsewhere is an assertion of its own).
  std::optional<ByteDfa> look_rest(const Rx& r) {
    const std::string at = "character " + std::to_string(r.at + 1) + " of the pattern";
    ORBIT_CHECK(++budget_.lookaheads <= kMaxLookaheads,
                what_ << ": over " << kMaxLookaheads << " lookaheads at " << at);
    const std::string what = what_ + ": the lookahead at " + at;
    ByteNfa sub;
    Builder inner(sub, text_, what, budget_);
    sub.start = sub.add();
    sub.accept = sub.add();
    const int32_t any = sub.add();
    sub.edge(any, 0x00, 0xFF, any);
    sub.empty(any, sub.accept);
    const Rx& x = r.kids.front();
    const auto branch = [&](const Rx& alt) {
      Frag f = inner.empty();
      bool ends = alt.kind == Rx::Kind::kEnd;
      if (alt.kind == Rx::Kind::kCat) {
        ends = !alt.kids.empty() && alt.kids.back().kind == Rx::Kind::kEnd;
        for (std::size_t k = 0; k + (ends ? 1 : 0) < alt.kids.size(); ++k) f = inner.then(f, inner.build(alt.kids[k]));
      } else if (!ends) {
        f = inner.then(f, inner.build(alt));
      }
      sub.empty(sub.start, f.start);
      sub.empty(f.end, ends ? sub.accept : any);
    };
    if (x.kind == Rx::Kind::kAlt) {
      for (const Rx& alt : x.kids) branch(alt);
    } else {
      branch(x);
    }
    return determinize_or_empty(sub, what, &budget_.work);
  }

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

  // The states a set's escapes share: after the backslash, after "\u00", and after "\u00" and a high hex
  // digit (0 or 1); -1 until built.
  struct Escapes {
    int32_t backslash = -1;
    int32_t u00 = -1;
    std::array<int32_t, 2> high{-1, -1};
  };

  // ASCII characters [lo, hi] as a JSON string writes them: the printable ones as their bytes, '"' and '\' as
  // \" and \\, the control characters as \b \f \n \r \t or else \u00XX (either case of hex digit).
  void ascii(uint32_t lo, uint32_t hi, const Frag& f, Escapes& esc) {
    uint32_t run = std::max(lo, 0x20u);  // printable bytes in ranges, cut at '"' and '\'
    for (uint32_t c = run; c <= hi; ++c) {
      if (c != '"' && c != '\\') continue;
      if (run < c) nfa_.edge(f.start, static_cast<uint8_t>(run), static_cast<uint8_t>(c - 1), f.end);
      run = c + 1;
    }
    if (run <= hi) nfa_.edge(f.start, static_cast<uint8_t>(run), static_cast<uint8_t>(hi), f.end);
    for (uint32_t c = lo; c <= hi; ++c) {
      if (c >= 0x20 && c != '"' && c != '\\') continue;
      const std::string shorts("\b\f\n\r\t\"\\");
      const std::size_t k = shorts.find(static_cast<char>(c));
      if (k != std::string::npos) {
        const auto letter = static_cast<uint8_t>("bfnrt\"\\"[k]);
        nfa_.edge(backslash(f, esc), letter, letter, f.end);
        continue;
      }
      const char* digits = "0123456789abcdef";
      const int32_t high = high_digit(f, esc, c >> 4);
      const auto low = static_cast<uint8_t>(digits[c & 15]);
      nfa_.edge(high, low, low, f.end);
      if (low >= 'a')
        nfa_.edge(high, static_cast<uint8_t>(low - 'a' + 'A'), static_cast<uint8_t>(low - 'a' + 'A'), f.end);
    }
  }

  int32_t backslash(const Frag& f, Escapes& esc) {
    if (esc.backslash < 0) {
      esc.backslash = nfa_.add(true);
      nfa_.edge(f.start, '\\', '\\', esc.backslash);
    }
    return esc.backslash;
  }

  // The state after "\u00" and `high` (0 or 1).
  int32_t high_digit(const Frag& f, Escapes& esc, uint32_t high) {
    if (esc.u00 < 0) {
      int32_t at = backslash(f, esc);
      for (const char c : {'u', '0', '0'}) {
        const int32_t to = nfa_.add(true);
        nfa_.edge(at, static_cast<uint8_t>(c), static_cast<uint8_t>(c), to);
        at = to;
      }
      esc.u00 = at;
    }
    int32_t& h = esc.high[high];
    if (h < 0) {
      h = nfa_.add(true);
      const auto digit = static_cast<uint8_t>('0' + high);
      nfa_.edge(esc.u00, digit, digit, h);
    }
    return h;
  }

  static constexpr int32_t kNone = -3;

  ByteNfa& nfa_;
  RegexText text_;
  const std::string& what_;
  LookBudget& budget_;
  std::map<std::size_t, int32_t> looks_;  // the assertion each lookahead was built as, by where it opens
  int32_t end_ = kNone;                   // the assertion '$' was built as
};

// One top-level alternative: its leading '^' and trailing '$' taken off, and the rest built, with any
// characters before and after it unless anchored (kSearch); lookaheads at its start through looking().
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
  Frag f = b.empty();
  if (syntax == RegexSyntax::kSearch && !begins) f = b.then(f, b.star(rx::any_char()));
  // Lookaheads where the match starts: applied to the match and what follows it as products of automata.
  std::size_t looks = 0;
  while (looks < kids.size() && kids[looks].kind == Rx::Kind::kLook) ++looks;
  if (looks > 0) return b.then(f, b.looking(kids, looks, ends || syntax == RegexSyntax::kAnchored));
  f = b.then(f, b.build(branch));  // an anchor left inside throws, naming where anchors may go
  if (syntax == RegexSyntax::kSearch && !ends) f = b.then(f, b.star(rx::any_char()));
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
  LookBudget budget;
  Builder b(nfa, text, what, budget);
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
  const std::string key = "regex|" + std::to_string(static_cast<int>(syntax)) + "|" +
                          std::to_string(static_cast<int>(text)) + "|" + pattern;
  return *memo_dfa(key, [&] { return determinize(regex_nfa(pattern, syntax, text, what), what); });
}

}  // namespace orbit::constrain

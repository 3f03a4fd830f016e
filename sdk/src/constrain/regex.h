// Regular expressions (the ECMA-262 subset JSON Schema's `pattern` uses in practice) compiled to a byte NFA
// (byte_dfa.h), over the bytes a JSON string writes for its characters.
//
// Supported: literals (UTF-8), '.', classes [a-z] [^...] with ranges and \d \w \s inside, the escapes
// \d \D \w \W \s \S \t \n \r \f \v \0 \xHH \uHHHH and escaped punctuation, groups (...) (?:...) (?<name>...),
// alternation |, quantifiers * + ? {n} {n,} {n,m} (a lazy '?' after them changes nothing here: the language
// is the same), '^' at the start of the pattern or of a top-level alternative, '$' anywhere (the end of the
// text), and lookaheads (?=X) and (?!X) anywhere (nested, in groups, under quantifiers; a quantified one as
// ECMA-262's Annex B reads it). A lookahead holds where the rest of the whole text, from its point to the end,
// is (or, negative, is not) X followed by anything, X's own '$' the end of the text: exact, over the bytes the
// text is written in (the rest is always whole characters, so "anything" and "not" range over the characters
// the pattern's matches are made of). Lookaheads where a match starts are applied as products of automata;
// others as assertions a run carries until they are met (byte_dfa.h).
// Refused, naming the construct and where it is: backreferences, lookbehind, word boundaries \b \B, \p{...}
// classes, \cX, '^' anywhere else, counts over 1000, over 32 lookaheads; and an automaton past the state or
// work bounds (byte_dfa.h), naming the lookahead when it is one's.
//
// Characters are written as a JSON string writes them (nlohmann's way): '"' as \" and '\' as \\, the
// control characters as \b \f \n \r \t or \u00XX (either case of hex digit), everything else as its UTF-8
// bytes; the surrogates D800-DFFF are never written.
#pragma once

#include <string>

#include "constrain/byte_dfa.h"

namespace orbit::constrain {

enum class RegexSyntax {
  kSearch,    // JSON Schema's pattern: matches when it matches somewhere in the string, unless anchored
  kAnchored,  // the whole text must match (orbit's own formats and number languages)
};

enum class RegexText {
  kJsonString,  // characters as a JSON string's content writes them (above)
  kAscii,       // characters as single ASCII bytes (numbers); a non-ASCII character is refused
};

// The NFA of `pattern`. Throws orbit::Error "<what>: ..." naming what is not supported and where.
ByteNfa regex_nfa(const std::string& pattern, RegexSyntax syntax, RegexText text, const std::string& what);

// The DFA of the same (determinize(regex_nfa(...))).
ByteDfa regex_dfa(const std::string& pattern, RegexSyntax syntax, RegexText text, const std::string& what);

}  // namespace orbit::constrain

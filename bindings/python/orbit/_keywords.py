"""Argument mistakes named by the call. pybind11 answers a misspelt keyword (w.generate([1], maxtokens=4)), a
missing argument (w.generate()) or one positional argument too many with "incompatible function arguments" and
every signature of the function, never naming the argument; the calls wrapped here raise
TypeError("generate: unexpected keyword argument 'maxtokens' (did you mean 'max_tokens'?)"),
TypeError("generate: missing required argument 'query'") or TypeError("generate: takes 1 positional argument
(query), got 2") instead. Only that TypeError of pybind11's is rewritten: the call's own errors, and every other
(an argument of a type no signature takes), pass unchanged.
"""
import difflib
import functools
import re

_INCOMPATIBLE = "incompatible function arguments"


def _split_top_level(text):
    """`text` split at the commas outside brackets and quotes (a parameter's type or default may hold some)."""
    parts, depth, quote, start = [], 0, None, 0
    for i, c in enumerate(text):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


def _signature(fn):
    """(positional, required, keywords) from pybind11's signature line (the docstring's first line): the names
    that may be given by position (self excluded), those of them without a default, and every name that may be
    given by keyword."""
    first = (fn.__doc__ or "").lstrip().split("\n", 1)[0]
    m = re.match(r"\w+\((.*)\)(?: -> .*)?$", first)
    positional, required, keywords, keyword_only = [], [], [], False
    for p in _split_top_level(m.group(1)) if m else []:
        if p == "*":
            keyword_only = True
            continue
        name = re.match(r"\w+", p)
        if name is None or name.group(0) == "self":
            continue
        keywords.append(name.group(0))
        if not keyword_only:
            positional.append(name.group(0))
            if " = " not in p:
                required.append(name.group(0))
    return positional, required, keywords


def _plural(n, word):
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _named_mistake(caller, signature, args, kwargs):
    """What the call got wrong by name, or None where it is not a name or a count (pybind11's message stays)."""
    positional, required, known = signature
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        near = difflib.get_close_matches(unknown[0], known, 1)
        hint = f" (did you mean '{near[0]}'?)" if near else f" (it takes {', '.join(known)})"
        return f"{caller}: unexpected keyword argument '{unknown[0]}'{hint}"
    if len(args) > len(positional):
        names = f" ({', '.join(positional)})" if positional else ""
        return (f"{caller}: takes {_plural(len(positional), 'positional argument')}{names}, "
                f"got {len(args)}")
    given = set(positional[:len(args)])
    twice = [k for k in kwargs if k in given]
    if twice:
        return f"{caller}: got argument '{twice[0]}' both by position and by keyword"
    missing = [n for n in required if n not in given and n not in kwargs]
    if missing:
        return f"{caller}: missing required argument '{missing[0]}'"
    return None


def named(fn, caller, method=False):
    """fn, raising TypeError naming an unknown keyword (and the nearest known one), a missing argument or a
    surplus positional one where pybind11 would list signatures. `method`: fn is a class's function, called
    with the instance first. fn's docstring, name and signature line are kept (functools.wraps)."""
    signature = _signature(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TypeError as e:
            if _INCOMPATIBLE not in str(e):
                raise
            said = _named_mistake(caller, signature, args[1:] if method else args, kwargs)
            if said is None:
                raise
            raise TypeError(said) from None

    return call


def name_keywords(owner, names):
    """Wraps each of `names` on `owner` (a class, or a module's namespace dict) with named()."""
    for name in names:
        if isinstance(owner, dict):
            owner[name] = named(owner[name], name)
        else:
            setattr(owner, name, named(getattr(owner, name), name, method=True))

"""Unknown keyword arguments named by the call. pybind11 answers a misspelt keyword (w.generate([1], maxtokens=4))
with "incompatible function arguments" and every signature of the function, never naming the word; the calls
wrapped here raise TypeError("generate: unexpected keyword argument 'maxtokens' (did you mean 'max_tokens'?)")
instead. Only that TypeError of pybind11's is rewritten: the call's own errors, and every other, pass unchanged.
"""
import difflib
import functools
import re

_INCOMPATIBLE = "incompatible function arguments"


def _parameters(fn):
    """The keyword names pybind11's signature line (the docstring's first line) gives the function."""
    first = (fn.__doc__ or "").lstrip().split("\n", 1)[0]
    return [n for n in re.findall(r"(?:\(|, )(\w+): ", first) if n != "self"]


def named(fn, caller):
    """fn, raising TypeError naming an unknown keyword (and the nearest known one) where pybind11 would list
    signatures. fn's docstring, name and signature line are kept (functools.wraps)."""
    known = _parameters(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TypeError as e:
            unknown = [k for k in kwargs if k not in known]
            if _INCOMPATIBLE not in str(e) or not unknown:
                raise
            near = difflib.get_close_matches(unknown[0], known, 1)
            hint = f" (did you mean '{near[0]}'?)" if near else f" (it takes {', '.join(known)})"
            raise TypeError(f"{caller}: unexpected keyword argument '{unknown[0]}'{hint}") from None

    return call


def name_keywords(owner, names):
    """Wraps each of `names` on `owner` (a class, or a module's namespace dict) with named()."""
    for name in names:
        if isinstance(owner, dict):
            owner[name] = named(owner[name], name)
        else:
            setattr(owner, name, named(getattr(owner, name), name))

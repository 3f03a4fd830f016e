"""response_format under a JSON Schema string `format`: each format OpenAI's structured outputs name, decoded
by the bundled stories260K, is an answer an independent check (the standard library's date, ipaddress, and
regular expressions written from the RFCs) takes; a format that is not served, and a format beside a pattern
that leaves no value, are refused naming where."""
import datetime
import ipaddress
import re

import numpy as np
import pytest

_TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-](\d\d):(\d\d))")
_DURATION = re.compile(r"P(?:(?:\d+Y(?:\d+M)?(?:\d+D)?|\d+M(?:\d+D)?|\d+D)"
                       r"(?:T(?:\d+H(?:\d+M)?(?:\d+S)?|\d+M(?:\d+S)?|\d+S))?"
                       r"|T(?:\d+H(?:\d+M)?(?:\d+S)?|\d+M(?:\d+S)?|\d+S)|\d+W)")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_ATOM = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+")


def _date(s):
    if not re.fullmatch(r"\d{4}-\d\d-\d\d", s):
        return False
    try:
        datetime.date(int(s[:4]) or 2000, int(s[5:7]), int(s[8:]))  # datetime has no year 0, a leap year as 2000
    except ValueError:
        return False
    return True


def _time(s):
    m = _TIME.fullmatch(s)
    if not m:
        return False
    h, mi, sec = int(m[1]), int(m[2]), int(m[3])
    offset = 0 if m[6] is None else (int(m[6]) * 60 + int(m[7])) * (-1 if m[5][0] == "-" else 1)
    offset_ok = m[6] is None or (int(m[6]) < 24 and int(m[7]) < 60)
    # A leap second only where the time is 23:59 UTC (RFC 3339 5.7): local time less the offset, within a day.
    leap_ok = sec < 60 or (sec == 60 and (h * 60 + mi - offset) % 1440 == 23 * 60 + 59)
    return h < 24 and mi < 60 and leap_ok and offset_ok


def _hostname(s):
    return all(_LABEL.fullmatch(label) for label in s.split("."))


def _email(s):
    local, at, domain = s.rpartition("@")
    return bool(at) and all(_ATOM.fullmatch(a) for a in local.split(".")) and "." in domain and _hostname(domain)


def _ipv4(s):
    try:
        ipaddress.IPv4Address(s)
    except ValueError:
        return False
    return True


def _ipv6(s):
    try:
        ipaddress.IPv6Address(s)
    except ValueError:
        return False
    return "%" not in s


CHECKS = {
    "date-time": lambda s: len(s) > 11 and s[10] in "Tt" and _date(s[:10]) and _time(s[11:]),
    "date": _date,
    "time": _time,
    "duration": lambda s: bool(_DURATION.fullmatch(s)),
    "email": _email,
    "hostname": _hostname,
    "ipv4": _ipv4,
    "ipv6": _ipv6,
    "uuid": lambda s: bool(re.fullmatch(r"[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}", s)),
}


def test_the_checks_tell_valid_from_invalid():
    # The independent checks themselves, on values either side of each format's edges.
    valid = {"date-time": "2024-02-29T05:29:60.5+05:30", "date": "2000-02-29", "time": "00:00:00z",
             "duration": "P1Y2M3DT4H5M6S", "email": "o'hara@example.co.uk", "hostname": "a-1.b",
             "ipv4": "255.0.0.1", "ipv6": "fe80::1:2", "uuid": "123e4567-e89b-12d3-a456-426614174000"}
    invalid = {"date-time": "2023-02-29T00:00:00Z", "date": "1900-02-29", "time": "24:00:00Z",
               "duration": "P1H", "email": "a@b", "hostname": "a-.b", "ipv4": "01.0.0.1", "ipv6": "1::2::3",
               "uuid": "123e4567e89b12d3a456426614174000"}
    for name, check in CHECKS.items():
        assert check(valid[name]), name
        assert not check(invalid[name]), name
    for leap in ("23:59:60Z", "15:59:60-08:00", "00:00:60+00:01"):
        assert _time(leap), leap
    for not_leap in ("23:59:60+05:30", "12:00:60Z", "23:58:60Z", "23:59:61Z"):
        assert not _time(not_leap), not_leap


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_an_answer_under_a_format_is_in_it(engine, name):
    window = engine.new_window()
    window.sync([{"role": "user", "content": "Give me a value."}])
    prompt = engine.tokenize("assistant:", False)
    bare = {"type": "string", "format": name}
    wrapped = {"type": "json_schema", "json_schema": {"name": "v", "schema": {
        "type": "object", "properties": {"v": bare}, "required": ["v"]}}}
    for response_format, max_tokens in ((bare, 64), (wrapped, 80), (bare, 40)):
        g = window.generate(prompt, response_format=response_format, max_tokens=max_tokens)
        value = g.json["v"] if response_format is wrapped else g.json
        assert isinstance(value, str), g.text
        assert CHECKS[name](value), (name, g.text)
        assert len(g.tokens) <= max_tokens


def test_formats_refused_naming_where(orbit, engine):
    window = engine.new_window()
    window.sync([{"role": "user", "content": "Give me a value."}])
    prompt = engine.tokenize("assistant:", False)
    card = {"type": "object", "properties": {"x": {"type": "string", "format": "credit-card"}}}
    with pytest.raises(orbit.OrbitError, match=r'response_format\.properties\.x\.format: "credit-card" is not '
                                               r'supported \(supported: base64, .*uuid'):
        window.generate(prompt, response_format=card, max_tokens=8)
    # A pattern whose every value the format refuses: February 29th of years that are not leap years, an
    # address at a domain of one label.
    for fmt, pattern in (("date", "^(1900|2023)-02-29$"), ("email", "^[a-z]+@[a-z]+$")):
        with pytest.raises(orbit.OrbitError, match="response_format: pattern and format together: admits no value"):
            window.generate(prompt, response_format={"type": "string", "format": fmt, "pattern": pattern},
                            max_tokens=16)
    # Where the pattern leaves values, both hold: only 2000 of these is a leap year.
    g = window.generate(prompt, response_format={"type": "string", "format": "date",
                                                 "pattern": "^(1900|2000|2023)-02-29$"}, max_tokens=16)
    assert g.json == "2000-02-29", g.text


def test_a_leap_second_only_at_2359_utc(orbit, engine):
    # Second 60 held to the local times that are 23:59 UTC: under +05:30 only 05:29, which the answer is in.
    window = engine.new_window()
    window.sync([{"role": "user", "content": "Give me a value."}])
    prompt = engine.tokenize("assistant:", False)
    for name, prefix in (("time", ""), ("date-time", "2016-12-31T")):
        rf = {"type": "string", "format": name, "pattern": "^" + prefix + "..:..:60.*[+]05:30$"}
        g = window.generate(prompt, response_format=rf, max_tokens=48)
        assert g.json.startswith(prefix + "05:29:60") and CHECKS[name](g.json), g.text
    # Noon is never 23:59 UTC under Z: a pattern that asks for its leap second leaves no value.
    with pytest.raises(orbit.OrbitError, match="response_format: pattern and format together: admits no value"):
        window.generate(prompt, response_format={"type": "string", "format": "time", "pattern": "^12:00:60Z$"},
                        max_tokens=16)


def test_a_schema_takes_numpy_values_and_names_what_json_cannot_hold(orbit, engine):
    # A schema's numpy.int64 (a bound computed with numpy) made json.dumps raise "Object of type int64 is not
    # JSON serializable", naming neither the argument nor the field.
    window = engine.new_window()
    window.sync([{"role": "user", "content": "Give me a value."}])
    prompt = engine.tokenize("assistant:", False)
    schema = {"type": "array", "items": {"type": "integer", "minimum": np.int64(0), "maximum": np.uint8(9)},
              "minItems": np.int32(2), "maxItems": np.int64(2)}
    g = window.generate(prompt, response_format=schema, max_tokens=24)
    assert len(g.json) == 2 and all(0 <= v <= 9 for v in g.json), g.text
    wrapped = {"type": "json_schema", "json_schema": {"name": "v", "schema": {"type": "number",
                                                                             "maximum": np.complex64(1)}}}
    with pytest.raises(TypeError, match=r"^generate: response_format\['json_schema'\]\['schema'\]\['maximum'\]: expected "
                                        r"a JSON value .*, got complex64$"):
        window.generate(prompt, response_format=wrapped, max_tokens=8)

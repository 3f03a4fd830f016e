"""What a repeated structured-output call pays once its schema is kept (orbit/constraint_cache.h): the first
Window.generate(..., response_format=schema) compiles the schema, checks the vocabulary spells it and computes
its masks; later calls with the same schema find it in the engine's constraint cache. Times the first call and
the median of the repeated ones, per schema, on a fresh engine each (stories260K, greedy, --tokens tokens),
beside an unconstrained generate. Not a test: the figures depend on the machine; first / repeated is the one
to read.

    ORBIT_PYTHON_PATH=build/bindings/python python3 bench/constrain/bench_schema_cache.py [--reps 10] [--tokens 8]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.environ.get("ORBIT_PYTHON_PATH", "build/bindings/python"))
import orbit  # noqa: E402

SCHEMAS = {
    # zod's z.hostname() (zod-to-json-schema): a lookahead bounds the length beside format hostname.
    "zod hostname": {"type": "string", "format": "hostname",
                     "pattern": "^(?=.{1,253}\\.?$)[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
                                "(?:\\.[a-zA-Z0-9](?:[-0-9a-zA-Z]{0,61}[0-9a-zA-Z])?)*\\.?$"},
    "email": {"type": "string", "format": "email"},
    "object with enums": {"type": "object", "properties": {
        "unit": {"enum": ["celsius", "fahrenheit"]}, "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}}, "required": ["unit", "city"]},
}


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--model", default=os.path.join(os.environ.get("ORBIT_MODELS_DIR", "models"),
                                                    "stories260K", "stories260K.bin"))
    a = ap.parse_args()
    print(f"ms per Window.generate of {a.tokens} tokens: the first call (compiles) and the median of {a.reps} "
          "repeated ones (kept)")
    print(f"{'schema':<20} {'first':>9} {'repeated':>9} {'ratio':>7} {'free':>7}  cache after")
    for name, schema in SCHEMAS.items():
        engine = orbit.Engine(a.model, pool_bytes=32 << 20)
        window = engine.new_window()
        window.sync([{"role": "user", "content": "Name a host."}])
        prompt = engine.tokenize("assistant:", False)
        window.generate(prompt, max_tokens=a.tokens)  # warm the forward and the vocabulary
        free = statistics.median(timed(lambda: window.generate(prompt, max_tokens=a.tokens, ignore_eos=True))
                                 for _ in range(a.reps))
        first = timed(lambda: window.generate(prompt, response_format=schema, max_tokens=a.tokens))
        again = statistics.median(
            timed(lambda: window.generate(prompt, response_format=schema, max_tokens=a.tokens)) for _ in range(a.reps))
        s = engine.stats.constraint_cache
        print(f"{name:<20} {first:9.2f} {again:9.2f} {first / again:6.1f}x {free:7.2f}  "
              f"{s.entries} entry, {s.bytes / 1024:.0f} KiB, {s.hits} hits, {s.misses} misses")
        engine.close()


if __name__ == "__main__":
    main()

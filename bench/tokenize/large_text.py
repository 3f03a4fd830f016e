#!/usr/bin/python3
"""Tokenizing a large text: time and peak memory of Engine.tokenize on N MB of story text, per tokenizer
(llama2.c's, with the bundled stories260K, and Hugging Face tokenizer.json's, with TinyStories-656K). Each
measurement runs in its own process so its peak resident memory is its own; the baseline line is a process
that loads the same model and tokenizes one word.

    OMP_NUM_THREADS=1 PYTHONPATH=build/bindings/python /usr/bin/python3 bench/tokenize/large_text.py [--mb 20]
"""
import argparse
import pathlib
import resource
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
MODELS = {"llama2.c (stories260K)": REPO / "models" / "stories260K" / "stories260K.bin",
          "tokenizer.json (TinyStories-656K)": REPO / "models" / "tinystories-656k"}
SENTENCE = "Once upon a time, there was a little girl named Lily. She liked to play outside. "


def child(model: str, chars: int) -> None:
    import orbit
    engine = orbit.Engine(model)
    text = (SENTENCE * (chars // len(SENTENCE) + 1))[:chars]
    t0 = time.perf_counter()
    ids = engine.tokenize(text)
    seconds = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{len(text)} {len(ids)} {seconds:.3f} {peak_mb:.0f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=20.0, help="text size in MB (default 20)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]))
        return 0
    print(f"{'tokenizer':<36} {'chars':>10} {'ids':>9} {'seconds':>8} {'peak MB':>8} {'base MB':>8}")
    for name, model in MODELS.items():
        rows = []
        for chars in (1, int(a.mb * 1e6)):
            out = subprocess.run([sys.executable, __file__, "--child", str(model), str(chars)], check=True,
                                 capture_output=True, text=True).stdout.split()
            rows.append(out)
        (_, _, _, base), (n, ids, seconds, peak) = rows
        print(f"{name:<36} {int(n):>10} {int(ids):>9} {float(seconds):>8.2f} {float(peak):>8.0f} {float(base):>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

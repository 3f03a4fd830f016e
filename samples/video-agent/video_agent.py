#!/usr/bin/env python3
"""Video agent: one clip's frames re-examined across reasoning steps under changing prompts.

The clip's frames are admitted once (each a chunk: encoded once, stored position-free). Then, at every
reasoning step, the prompt changes: the previous question leaves the window (evict), the frames the new
question is about are moved last, next to it (reorder: the planner looks up orbit patches keyed by each
frame's antecedent *set*, so an order seen before costs no forward), frames judged irrelevant are dropped to
save room (evict) and looked back at later (recall: canonical from the store, a fresh patch on its current
context), and the agent answers (greedy decode) into a short running list of notes (live turns).

    window  [ frame 0 | frame 1 | ... | frame 7 | note | question | note ]      the clip, then the reasoning

Frames are synthetic visual token streams, not text: the bundled model has no vision tower, so a frame is a
deterministic stream of token ids standing for a vision encoder's output: a background shared by every
frame of the clip (highly redundant), an object whose tokens move from frame to frame, and a timestamp
token. Decoded as text they are gibberish, and the table labels them as what they are. With a
vision-language model, register the vision tower's output instead (`engine.add_embeddings`). The
questions and the agent's answers are text (the model's tokenizer; answers decoded greedily by the model).
Every number is measured on real model computation (the bundled stories260K, or --model with a
tokenizer).

    /usr/bin/python3 samples/video-agent/video_agent.py            # 16 steps on the bundled model
    /usr/bin/python3 samples/video-agent/video_agent.py --short    # 6 steps (what the tests run)
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "common"))
import sample_kit as kit  # noqa: E402

FRAMES = 8
FRAME_TOKENS = 24
NOTES = 2              # answers kept as running notes
# The questions cycle: each asks about some frames (moved last, next to the question). Orders repeat from
# the second cycle on, so their orbit patches are stored already.
QUESTIONS = [
    {"text": "Mom asked, \"What happens in the video?\"", "focus": [], "drop": None, "look_back": None},
    {"text": "Mom asked, \"Where does the ball go?\"", "focus": [5, 6], "drop": None, "look_back": None},
    {"text": "Mom asked, \"When does the ball stop?\"", "focus": [3], "drop": 2, "look_back": None},
    {"text": "Mom asked, \"Look again. What did you see?\"", "focus": [7], "drop": None, "look_back": 2},
]
ANSWER_QUERY = "Tim said,"        # the agent decodes its answer after it
ANSWER_TOKENS = 6
PROBE = "Tim looked at the"       # the fidelity probe, read after the window


class Clip:
    """Deterministic synthetic frames as visual token streams (ids, not text): one background, a moving
    object, a timestamp."""

    def __init__(self, vocab: int, seed: int):
        self.vocab, self.seed = vocab, seed
        rng = np.random.default_rng([seed, 11])
        self.background = rng.integers(100, 500, size=6)
        self.object = rng.integers(100, 500, size=3)

    def frame(self, t: int) -> list[int]:
        body = np.resize(self.background, FRAME_TOKENS - 1)   # the scene: the same in every frame
        x = (2 + 3 * t) % (len(body) - len(self.object))       # the object moves
        body[x:x + len(self.object)] = self.object
        return kit.token_ids(np.concatenate([[90 + t], body]), self.vocab)


def run(model=kit.DEFAULT_MODEL, *, steps: int = 16, policy: str = "default", out=None, seed: int = 0,
        threads: int = 0, dump_logits: bool = False, quiet: bool = False) -> dict:
    """Runs the episode, prints the summary table, writes the outputs; returns the report's paths and totals."""
    orbit = kit.import_orbit()
    out = pathlib.Path(out or kit.REPO / "out" / "video-agent")
    with orbit.Engine(str(model), page_size=16, threads=threads) as engine:
        info = engine.model_info
        vocab = info.vocab_size
        kit.check_has_tokenizer(engine, "the video agent")
        answer_query = engine.tokenize(ANSWER_QUERY, bos=False)
        probe = engine.tokenize(PROBE, bos=False)
        longest_question = max(len(engine.tokenize(q["text"], bos=False)) for q in QUESTIONS)
        kit.check_model_fits(info, FRAMES * FRAME_TOKENS + NOTES * (len(answer_query) + ANSWER_TOKENS)
                             + longest_question + len(probe) + ANSWER_TOKENS, "the video agent")
        clip = Clip(vocab, seed)
        frames = []
        for t in range(FRAMES):
            tokens = clip.frame(t)
            chunk = engine.add_tokens(tokens, label=f"frame {t}")   # a visual token stream, not text
            frames.append(chunk)
        window = engine.new_window(policy=policy, label="video-agent")
        progress = None if quiet else kit.Progress(steps, "video-agent")
        ep = kit.Episode(orbit, engine, window, name="video-agent",
                         description=f"Video agent: a {FRAMES}-frame clip re-examined over {steps} reasoning steps "
                                     f"under changing prompts, with reorders, drops and look-backs "
                                     f"(samples/video-agent, seed {seed}).",
                         probe=probe, progress=progress, keep_logits=dump_logits)
        for t, chunk in enumerate(frames):
            ep.register(chunk, clip.frame(t), f"frame{t}")
        question_turn = None
        notes: list = []
        for step in range(steps):
            q = QUESTIONS[step % len(QUESTIONS)]
            ep.begin_step(f"q{step % len(QUESTIONS)} " + (f"f{','.join(map(str, q['focus']))}" if q["focus"] else "clip"))
            if step == 0:
                for chunk in frames:
                    ep.admit(chunk)      # the clip, encoded once
                ep.note_text("frames", f"{FRAMES} synthetic visual token streams of {FRAME_TOKENS} ids each "
                                       "(stand-ins for a vision encoder's tokens, not text)")
            if question_turn is not None:
                ep.evict(question_turn)  # the prompt changes
            if len(notes) >= NOTES:
                ep.evict(notes.pop(0))   # the oldest note leaves
            if q["look_back"] is not None and frames[q["look_back"]] in window.evicted:
                # look back at a dropped frame: back in its clip place, before the next frame present
                t = q["look_back"]
                later = [i for i in window.instances if not i.is_turn and frames.index(i.chunk) > t]
                ep.recall(frames[t], before=later[0] if later else None)
            if q["drop"] is not None and frames[q["drop"]] in window:
                ep.evict(next(i for i in window.instances if not i.is_turn and i.chunk == frames[q["drop"]]))
            # the frames the question is about go last (next to it); the others keep clip order
            present = [i.chunk for i in window.instances if not i.is_turn]
            focus = [frames[f] for f in q["focus"] if frames[f] in present]
            rest = sorted((c for c in present if c not in focus), key=frames.index)
            ep.reorder_chunks(rest + focus)
            question = engine.tokenize(q["text"], bos=False)
            question_turn = ep.add_turn(question, note="question").added[0]
            ep.note_text("question", engine.detokenize(question))
            answer = ep.generate(answer_query, max_tokens=ANSWER_TOKENS)
            notes.append(ep.add_turn(answer_query + answer, note="note").added[0])
            ep.note_text("answer", engine.detokenize(answer_query + answer))
            ep.end_step()
        title = f"video agent on {pathlib.Path(str(model)).name}: {steps} steps, policy {window.policy.name}"
        meta = {"model": str(model), "fingerprint": info.fingerprint, "policy": window.policy.name,
                "steps_requested": steps, "seed": seed, "frames": FRAMES, "frame_tokens": FRAME_TOKENS,
                "frame_content": "synthetic visual token streams (token ids standing for a vision encoder's output, "
                                 "not text)", "answer_query": ANSWER_QUERY, "probe_text": PROBE}
        return kit.finish(ep, window, out, meta, title)


def main(argv=None) -> int:
    return kit.main(run, __doc__.split("\n\n")[0], "video-agent", default_steps=16, short_steps=6, argv=argv)


if __name__ == "__main__":
    sys.exit(main())

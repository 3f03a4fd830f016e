"""The GIL while orbit's core works: encoding text holds no other Python thread (orbit/__init__.py's promise)."""
import threading
import time


def test_tokenizing_a_long_text_lets_other_threads_run(orbit, stories260k_path):
    """Engine.tokenize and the calls given text (a str query or turn, add_tokens(str)) encode without the GIL, as
    the module promises of the core's work: a thread counting while the main one is inside the call counts on.
    With the GIL held for the whole encoding it could count at most once (a switch just before the call)."""
    engine = orbit.Engine(str(stories260k_path))
    text = "Once upon a time, there was a little dog. " * 20000
    inside = threading.Event()
    done = threading.Event()
    counted = []

    def count():
        while not done.is_set():
            if inside.is_set():
                counted.append(1)
            time.sleep(0.0005)

    t = threading.Thread(target=count)
    t.start()
    try:
        window = engine.new_window()
        # add_tokens and logits refuse the text once encoded (longer than the model's positions): encoded all the same
        for name, call in (("tokenize", lambda: engine.tokenize(text)), ("add_tokens", lambda: engine.add_tokens(text)),
                           ("Window.logits", lambda: window.logits(text))):
            counted.clear()
            inside.set()
            try:
                call()
            except orbit.OrbitError as e:
                assert name != "tokenize" and "positions" in str(e), e
            inside.clear()
            assert len(counted) >= 3, f"{name}: another thread counted {len(counted)} times during the call"
    finally:
        done.set()
        t.join()

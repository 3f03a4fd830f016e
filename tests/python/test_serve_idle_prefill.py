"""`orbit serve` prefills a session's answer in idle time as its next request will send it back (anticipation).

An answer that fills the model's context leaves no next turn to prepare: the server skips it without a word,
where it used to print "prefilling session X's answer failed" for every such conversation, as if something had
gone wrong. Every server is started here on 127.0.0.1 (any free port) and stopped."""
import time

MODEL_NAME = "stories260K.bin"  # 512 positions; "the cat sat " is 5 tokens, and a one-message list 14 more


def ask(server, session, repeats, max_tokens):
    body = {"model": MODEL_NAME, "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": "the cat sat " * repeats}]}
    return server.call("/v1/chat/completions", body, session=session)


def idle_tokens(server, session):
    return server.call(f"/v1/sessions/{session}")["savings"]["idle_forward_tokens"]


def test_an_answer_that_fills_the_context_is_not_reported_as_a_failure(start_serve, stories260k_path):
    server = start_serve(stories260k_path)
    # Each prompt plus its answer ends at the context's last position, so the answer's next turn cannot fit.
    for session, repeats, max_tokens in (("a-full-1", 99, 3), ("a-full-2", 98, 8)):
        usage = ask(server, session, repeats, max_tokens)["usage"]
        assert usage["prompt_tokens"] + max_tokens == 512, usage
        assert usage["completion_tokens"] == max_tokens, usage
    # A session whose next turn fits, named after them: the idle worker takes ready sessions in name order,
    # so once this one's answer is prefilled, the full ones were tried before it.
    ask(server, "z-control", 10, 3)
    deadline = time.monotonic() + 120
    while idle_tokens(server, "z-control") == 0:
        assert time.monotonic() < deadline, "the idle worker never prefilled z-control's answer"
        time.sleep(0.05)
    assert "prefilling" not in server.output(), server.output()
    for session in ("a-full-1", "a-full-2"):
        assert idle_tokens(server, session) == 0


def test_a_session_s_saved_tokens_count_its_idle_work(start_serve, stories260k_path):
    # An append-only chat: what idle time prefilled is what the radix cache computes at the next request, so
    # it is no saving (saved_tokens counted only the critical path's forwards, and called it one).
    server = start_serve(stories260k_path)
    messages = [{"role": "user", "content": "the cat sat " * 4}]
    for turn in range(3):
        body = {"model": MODEL_NAME, "max_tokens": 6, "temperature": 0, "messages": messages}
        answer = server.call("/v1/chat/completions", body, session="append-only")
        messages += [{"role": "assistant", "content": answer["choices"][0]["message"]["content"]},
                     {"role": "user", "content": f"and then {turn}"}]
        deadline = time.monotonic() + 120
        while idle_tokens(server, "append-only") == 0:  # the answer's prefill, before the next request
            assert time.monotonic() < deadline, "the idle worker never prefilled the answer"
            time.sleep(0.05)
    s = server.call("/v1/sessions/append-only")["savings"]
    orbit = s["forward_tokens"] + s["idle_forward_tokens"]
    assert s["idle_forward_tokens"] > 0, s
    assert s["saved_tokens"] == s["radix_cache_tokens"] - orbit, s
    assert s["total_ratio"] == orbit / s["radix_cache_tokens"], s
    assert s["ratio"] == s["forward_tokens"] / s["radix_cache_tokens"], s

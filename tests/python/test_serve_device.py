"""`orbit serve --device D --dtype T`: the server in bfloat16 on the CPU over HTTP (sessions decoding at once, a
session's next request reusing its KV, n > 1), its startup line naming device and dtype, and the arguments it
refuses with their names. The same on a CUDA device is tests/cpp/test_serve_cuda.cpp (label gpu)."""
import math
import threading

import pytest

MODEL = "tinystories-656k"


def ask(server, question, session=None, **fields):
    body = {"model": MODEL, "max_tokens": 12, "temperature": 0,
            "messages": [{"role": "system", "content": "You tell short stories."},
                         {"role": "user", "content": question}]}
    body.update(fields)
    return server.call("/v1/chat/completions", body, session)


def test_serve_in_bfloat16_answers_sessions_at_once_and_reuses_their_kv(start_serve, models_dir):
    server = start_serve(models_dir / MODEL, "--dtype", "bfloat16", "--no-anticipate", "--audit", "0")
    assert "cpu, bfloat16" in server.output(), server.output()
    questions = ["What did the dog find?", "Who was happy?", "Where were they?", "Why did she smile?"]
    alone = [ask(server, q)["choices"][0]["message"]["content"] for q in questions]
    together = [None] * len(questions)

    def run(i):
        together[i] = ask(server, questions[i], session=f"s{i}")["choices"][0]["message"]["content"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(questions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone  # decoded together, each is the answer it gets alone
    assert all(alone)

    first = ask(server, questions[0], session="s0")
    body = {"model": MODEL, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "system", "content": "You tell short stories."},
                         {"role": "user", "content": questions[0]},
                         {"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                         {"role": "user", "content": "Tell me more."}]}
    second = server.call("/v1/chat/completions", body, "s0")["usage"]
    assert second["orbit"]["forward_tokens"] < second["prompt_tokens"]
    assert second["orbit"]["forward_tokens"] <= second["orbit"]["radix_cache_tokens"]
    # What was not forwarded is what OpenAI clients read as cached prompt tokens.
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert cached == second["prompt_tokens"] - math.ceil(second["orbit"]["forward_tokens"]) and cached > 0
    # The session's KV is held in bfloat16: half the bytes float32 holds for the same conversation.
    f32 = start_serve(models_dir / MODEL, "--no-anticipate", "--audit", "0")
    ask(f32, questions[0], session="s0")
    f32.call("/v1/chat/completions", body, "s0")
    bf16, full = server.call("/v1/sessions/s0")["window"], f32.call("/v1/sessions/s0")["window"]
    assert bf16["device_bytes"] > 0
    if bf16["tokens"] == full["tokens"]:  # the same answer's length (each dtype decodes its own answer)
        assert 2 * bf16["device_bytes"] == full["device_bytes"]
    else:
        per_token = (bf16["device_bytes"] / bf16["tokens"]) / (full["device_bytes"] / full["tokens"])
        assert 0.4 <= per_token <= 0.6, (bf16, full)

    forks = ask(server, questions[2], n=3)
    assert [c["message"]["content"] for c in forks["choices"]] == [alone[2]] * 3


@pytest.mark.parametrize("args, named", [
    (["--dtype", "int8"], "--dtype"),
    (["--dtype", "float16"], "float16"),  # CUDA only
    (["--device", "gpu"], "--device"),
    (["--device-tier-mb", "8"], "--device-tier-mb"),
    (["--pool-mb", "99999999999999999"], "--pool-mb"),
    (["--max-body-kb", "-1"], "--max-body-kb"),
])
def test_serve_refuses_bad_device_arguments_naming_them(refused_serve, models_dir, args, named):
    stderr = refused_serve(models_dir / MODEL, *args)
    assert named in stderr, stderr


def test_serve_on_cuda_where_there_is_none_names_the_argument(refused_serve, models_dir):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device (test_serve_cuda covers serving on it)")
    stderr = refused_serve(models_dir / MODEL, "--device", "cuda")
    assert "--device" in stderr and "no CUDA device" in stderr, stderr

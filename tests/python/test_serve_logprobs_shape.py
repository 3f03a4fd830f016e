"""choices[].logprobs of a chat completion asked for with logprobs: an object even where the answer has no token
to list ({"content": [], "refusal": null}: an end-of-sequence token first, a stop string at the first token), as
clients that read choice.logprobs.content expect; null where logprobs were not asked for. It was null for an empty
answer. The bundled stories260K on one server on 127.0.0.1 (stories_server)."""
from conftest import post_json

MODEL = "stories260K.bin"
STORY = [{"role": "user", "content": "Tell me a story about a cat."}]
EOS = 2  # stories260K's end-of-sequence token


def chat(server, **fields):
    status, body = post_json(server, "/v1/chat/completions", dict({"model": MODEL, "messages": STORY,
                                                                   "temperature": 0, "max_tokens": 8}, **fields))
    assert status == 200, body
    return body["choices"]


def test_an_answer_that_ends_at_once_lists_no_entries_in_an_object(stories_server):
    for choice in chat(stories_server, logprobs=True, top_logprobs=2, logit_bias={str(EOS): 100}, n=2):
        assert choice["message"]["content"] == "" and choice["finish_reason"] == "stop", choice
        assert choice["logprobs"] == {"content": [], "refusal": None}, choice
    for choice in chat(stories_server, logit_bias={str(EOS): 100}):
        assert choice["logprobs"] is None, choice


def test_a_stop_string_at_the_first_token_lists_no_entries_in_an_object(stories_server):
    first = chat(stories_server, logprobs=True)[0]["logprobs"]["content"][0]["token"]
    assert first, first  # a stop string must not be empty
    [choice] = chat(stories_server, logprobs=True, stop=[first])
    assert choice["message"]["content"] == "" and choice["finish_reason"] == "stop", choice
    assert choice["logprobs"] == {"content": [], "refusal": None}, choice

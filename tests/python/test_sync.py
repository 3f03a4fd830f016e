"""Window.sync(messages) and Engine.render_chat from Python, on the bundled TinyStories-656K (a Hugging Face
directory without a chat template: the tests pass one, or write one into a copy of the directory).

The property test here is the short Python twin of tests/cpp/test_sync.cpp's: random edits of a message list,
a sync and a read after each, then (a) the window's instances are tokenize_chat(messages) in order and (b) the
running total of orbit's critical-path forward tokens stays at or below that of a prefix cache holding the last
read (what one conversation's KV cache reuses). A radix cache that keeps every prefix ever read is measured
too, and is not asserted here: on this short, small list, removing or moving messages often comes back to a
list read before, whose exact KV such a cache still holds while orbit, which keeps one instance per message,
recomputes what it moved or never stored (seed 3, step 7: a turn moved at step 6, then the message before it
removed, gives back step 4's list; orbit forwards the turn's 16 tokens, the radix cache none). The C++ test
asserts the radix cache on edit sequences without explicit returns and reports the returns apart.
"""
import json
import random
import re
import shutil

import pytest

# Every message starts with the BOS special token, written after a space: the tokenizer's added tokens are
# normalized, so the text it matches as the special token is the normalized "▁<|start_story|>".
TEMPLATE = ("{% for message in messages %} <|start_story|>{{ message.role }}: {{ message.content }}{% endfor %}"
            "{% if add_generation_prompt %} <|start_story|>assistant:{% endif %}")


@pytest.fixture
def engine(orbit, models_dir):
    with orbit.Engine(models_dir / "tinystories-656k", pool_bytes=64 << 20, background="inline") as e:
        yield e


def assert_window_is(engine, window, messages, **chat):
    expected = engine.tokenize_chat(messages, False, **chat)
    pos = 0
    for info in window.instances:
        piece = expected[pos:pos + info.length]
        if info.is_turn:
            assert info.turn_tokens == piece
        else:
            assert info.chunk.key == engine.add_tokens(piece).key
        pos += info.length
    assert pos == len(expected)


def test_render_chat_and_sync(orbit, engine):
    messages = [{"role": "system", "content": "You tell short stories."},
                {"role": "user", "content": "Tell me about a dog."}]
    text = engine.render_chat(messages, chat_template=TEMPLATE)
    assert text == (" <|start_story|>system: You tell short stories. <|start_story|>user: Tell me about a dog."
                    " <|start_story|>assistant:")
    assert not engine.has_chat_template

    window = engine.new_window()
    report = window.sync(messages, chat_template=TEMPLATE, chunk_min_tokens=24)
    assert isinstance(report, orbit.SyncReport)
    assert [u.action for u in report.plan.units] == [orbit.SyncAction.turn, orbit.SyncAction.turn]
    assert str(orbit.SyncAction.recall) == "recall"
    assert report.plan.tokens + report.generation_prompt == engine.tokenize_chat(messages, chat_template=TEMPLATE)
    assert_window_is(engine, window, messages, chat_template=TEMPLATE)

    answer = window.generate(report.generation_prompt, max_tokens=8)
    messages.append({"role": "assistant", "content": answer.text})
    messages.append({"role": "tool", "tool_call_id": "call_1", "content":
                     "the dog ran to the park and saw a big red ball and a little bird in the tree and the sun "
                     "was happy and the boy and the girl went home with the dog."})
    report = window.sync(messages, chat_template=TEMPLATE, chunk_min_tokens=24)
    assert [u.action.label for u in report.plan.units] == ["keep", "keep", "turn", "admit"]
    assert [p.op.label for p in report.plans] == ["turn", "admit"]
    assert "admit" in report.plan.describe()

    # Nothing changed: nothing to do.
    assert not window.plan_sync(messages, chat_template=TEMPLATE, chunk_min_tokens=24).changes()

    # Drop the tool output and bring it back: evicted, then recalled.
    tool = report.plan.units[3].instance
    report = window.sync(messages[:3], chat_template=TEMPLATE, chunk_min_tokens=24)
    assert report.plan.evict == [tool]
    report = window.sync(messages, chat_template=TEMPLATE, chunk_min_tokens=24)
    assert report.plan.units[3].action == orbit.SyncAction.recall and report.plan.units[3].instance == tool
    assert_window_is(engine, window, messages, chat_template=TEMPLATE)


def test_messages_are_checked(orbit, engine):
    window = engine.new_window()
    with pytest.raises(TypeError, match="list of message dicts"):
        window.sync("hello")
    with pytest.raises(ValueError, match=r"messages\[0\].role is missing"):
        window.sync([{"content": "hi"}])
    with pytest.raises(TypeError, match=r"messages\[1\]"):
        window.sync([{"role": "user", "content": "hi"}, "there"])
    with pytest.raises(ValueError, match="only text parts"):
        window.sync([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    # Text parts and None content are accepted; tool calls reach the template.
    parts = [{"role": "user", "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "b"}]},
             {"role": "assistant", "content": None,
              "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "look", "arguments": {"x": 1}}}]}]
    calls = ("{% for m in messages %}{{ m.role }}:{{ m.content }}"
             "{% for c in m.tool_calls or [] %}[{{ c.function.name }} {{ c.function.arguments | tojson }}]"
             "{% endfor %};{% endfor %}")
    assert engine.render_chat(parts, False, chat_template=calls) == 'user:a b;assistant:[look {"x": 1}];'


def test_the_model_chat_template_is_found(orbit, models_dir, tmp_path):
    model = tmp_path / "tinystories-chat"
    shutil.copytree(models_dir / "tinystories-656k", model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = TEMPLATE
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    with orbit.Engine(model, pool_bytes=16 << 20) as e:
        assert e.has_chat_template
        w = e.new_window()
        messages = [{"role": "user", "content": "Hi."}]
        report = w.sync(messages)
        assert report.plan.chat_template == "model"
        assert e.render_chat(messages) == " <|start_story|>user: Hi. <|start_story|>assistant:"


def test_plain_template_without_one(orbit, engine):
    messages = [{"role": "user", "content": "Hi."}]
    assert engine.render_chat(messages) == "<|start_story|>user: Hi.\nassistant:"
    report = engine.new_window().sync(messages)
    assert report.plan.chat_template == "plain"


def test_the_readme_message_example_runs(orbit, repo_root, monkeypatch, capsys):
    text = (repo_root / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "window.sync" in b)
    monkeypatch.chdir(repo_root)
    exec(compile(block, "README.md", "exec"), {})
    assert "admit" in capsys.readouterr().out  # the tool output became a chunk


WORDS = "the little girl boy dog cat ball tree park sun happy big red play run saw found wanted said mom".split()


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n)) + "."


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sync_property(orbit, engine, seed):
    rng = random.Random(seed)
    window = engine.new_window()
    messages = [{"role": "system", "content": "You tell short stories."}]
    removed = []
    held = set()  # a radix cache: every prefix of instance keys read so far
    last = []     # a cache of the last read only
    orbit_total = radix_total = last_total = 0.0
    counter = 0
    for step in range(30):
        edit = "append" if step < 3 or len(messages) < 3 else rng.choice(
            ["append", "trim", "remove", "summarize", "move", "reinsert"])
        if edit == "append":
            counter += 1
            role = rng.choice(["user", "assistant", "tool"])
            words = rng.randint(18, 36) if role == "tool" else rng.randint(3, 9)
            messages.append({"role": role, "content": f"#{counter} " + sentence(rng, words)})
        elif edit == "trim":
            removed.append(messages.pop(1))
        elif edit == "remove":
            removed.append(messages.pop(rng.randrange(1, len(messages))))
        elif edit == "summarize":
            i = rng.randrange(1, len(messages))
            span = messages[i:i + rng.randint(2, 3)]
            del messages[i:i + len(span)]
            removed.extend(span)
            counter += 1
            messages.insert(i, {"role": "system", "content": f"summary #{counter}: " + sentence(rng, 6)})
        elif edit == "move":
            m = messages.pop(rng.randrange(1, len(messages)))
            messages.insert(rng.randrange(1, len(messages) + 1), m)
        elif edit == "reinsert" and removed:
            messages.insert(rng.randrange(1, len(messages) + 1), removed.pop(rng.randrange(len(removed))))
        while len(messages) > 1 and len(engine.tokenize_chat(messages, chat_template=TEMPLATE)) > 400:
            removed.append(messages.pop(1))

        before = window.stats.critical_forward_tokens
        report = window.sync(messages, chat_template=TEMPLATE, chunk_min_tokens=24)
        assert_window_is(engine, window, messages, chat_template=TEMPLATE)  # (a)
        window.generate(report.generation_prompt, max_tokens=1)  # the read
        orbit_total += window.stats.critical_forward_tokens - before
        prefix, reused, keys = (), True, [i.chunk.key for i in window.instances]
        same = next((k for k, (a, b) in enumerate(zip(keys, last)) if a != b), min(len(keys), len(last)))
        for k, info in enumerate(window.instances):
            prefix += (info.chunk.key,)
            reused = reused and prefix in held
            radix_total += 0 if reused else info.length
            last_total += 0 if k < same else info.length
            held.add(prefix)
        last = keys
        assert orbit_total <= last_total, f"step {step} ({edit}): {orbit_total} > {last_total}"  # (b)
    print(f"seed {seed}: orbit {orbit_total:.0f} forward tokens, last-read cache {last_total:.0f}, "
          f"radix cache {radix_total:.0f}")

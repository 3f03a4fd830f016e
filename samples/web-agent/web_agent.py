#!/usr/bin/env python3
"""Web agent: a tool-calling browsing loop on an orbit window, driven by a message list.

The agent browses a small town's news site with three function tools, as an OpenAI tool loop does: every step
the model calls a tool (open_page, go_back or search; browse_tools.py), the tool runs, and its result (the
page it leads to) goes back as a tool message. The agent keeps its conversation as chat messages and hands the
whole list to `Window.sync` at every step (sdk/include/orbit/sync.h): the system prompt and the task, then per
step the assistant's call and the tool's page. The list keeps the last three pages: the oldest page message
leaves it, and sync slides that page out of the window. A search finds a page read before, often one that has
left: its message returns, and sync recalls it (the page's canonical comes from the store and gets a fresh
patch on its current context). When the list outgrows the model's positions the oldest calls leave it and sync
evicts them (the system message and the task stay). Pages are chunks (encoded once, stored position-free);
the calls, shorter, are live turns.

    window  [ system | task | ...calls... | page p-2 | call | page p-1 | call | page p ]

The call is decoded by `Window.generate(tools=TOOLS, tool_choice=<the step's tool>)`: under the tool's grammar
(orbit/constraint.h), so even a story model writes a valid call, read back into `Generation.tool_calls`. The
loop names the tool each step (a story model cannot plan a browse) and the model writes the arguments.
Everything is text through the model's tokenizer and a compact chat template (chat_template.jinja: the model
has 512 positions). Every number is measured on real model computation (the bundled stories260K).

    /usr/bin/python3 samples/web-agent/web_agent.py            # 32 steps on the bundled model
    /usr/bin/python3 samples/web-agent/web_agent.py --short    # 8 steps (what the tests run)

Served mode: the same agent drives `orbit serve` as an OpenAI client (chat_client.py, standard library only):
every step POSTs the whole message list with `tools` and `tool_choice` to /v1/chat/completions under one
session (X-Orbit-Session); the server decodes the call under the tool's grammar and answers with
message.tool_calls (finish_reason "tool_calls"); the tool runs and its page goes back as a tool message. At
the end it prints orbit's forward tokens against the radix cache's, from each answer's usage.orbit and from
GET /v1/sessions/{id}, and the session's audits (served logits measured against a re-prefill). The client waits
--think-ms (default 250) after each answer, the tool's run, which the server spends on the session's idle work;
--think-ms 0 sends requests back to back, and then that work races them. The server must render with the
sample's template (--serve starts it so):

    /usr/bin/python3 samples/web-agent/web_agent.py --serve                         # starts build/cli/orbit serve
    /usr/bin/python3 samples/web-agent/web_agent.py --server http://127.0.0.1:8000  # a server started with
        # build/cli/orbit serve --model models/stories260K/stories260K.bin --chat-template samples/web-agent/chat_template.jinja
"""
from __future__ import annotations

import pathlib
import sys
import time
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "common"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import sample_kit as kit  # noqa: E402
from sample_outputs import clip  # noqa: E402
from browse_tools import (CHAT_TEMPLATE, CHAT_TEMPLATE_FILE, SYSTEM, TASK, TOOL_CALL_FORMAT, TOOLS,  # noqa: E402
                          Browser, Site, call_message, describe_call, tool_for_step, tool_message)

KEEP = 3              # pages kept in the list (and the window)
CALL_TOKENS = 64      # tokens a call may take (the longest, a search, takes about 55)
PROBE = "Lily looked at the page and"      # the fidelity probe, read after the window


def trim(entries: list, fits) -> None:
    """The oldest calls leave the list while it does not fit (then the oldest pages); system and task stay.
    `entries` holds (message, note) pairs."""
    while not fits():
        for role in ("assistant", "tool"):
            oldest = next((k for k, (m, _) in enumerate(entries) if m["role"] == role), None)
            if oldest is not None:
                del entries[oldest]
                break
        else:
            return


def add_result(entries: list, calls: list[dict], page: int, text: str) -> None:
    """The call and its page join the list; the oldest page leaves it when KEEP are there."""
    entries.append((call_message(calls), "call"))
    pages = [k for k, (m, _) in enumerate(entries) if m["role"] == "tool"]
    if len(pages) >= KEEP:
        del entries[pages[0]]
    entries.append((tool_message(calls[0], text), f"page{page}"))


def run(model=kit.DEFAULT_MODEL, *, steps: int = 32, policy: str = "default", out=None, seed: int = 0,
        threads: int = 0, dump_logits: bool = False, quiet: bool = False) -> dict:
    """Runs the episode, prints the summary table, writes the outputs; returns the report's paths and totals."""
    orbit = kit.import_orbit()
    out = pathlib.Path(out or kit.REPO / "out" / "web-agent")
    with orbit.Engine(str(model), page_size=16, threads=threads) as engine:
        info = engine.model_info
        kit.check_has_tokenizer(engine, "the web agent")
        site, browser = Site(seed), Browser(Site(seed))
        probe = engine.tokenize(PROBE, bos=False)
        positions = info.max_positions or 4096
        # at least the system prompt, the task, one call and its page, and the next call
        one_step = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK},
                    {"role": "tool", "content": max((site.page(p) for p in range(12)), key=len)}]
        kit.check_model_fits(info, len(engine.tokenize_chat(one_step, True, chat_template=CHAT_TEMPLATE, tools=TOOLS))
                             + 2 * CALL_TOKENS, "the web agent")
        window = engine.new_window(policy=policy, label="web-agent")
        progress = None if quiet else kit.Progress(steps, "web-agent")
        ep = kit.Episode(orbit, engine, window, name="web-agent",
                         description=f"Web agent: {steps} tool calls (open_page, go_back, search), the last {KEEP} "
                                     f"pages over the calls, synced from a message list (samples/web-agent, "
                                     f"seed {seed}).",
                         probe=probe, progress=progress, keep_logits=dump_logits)
        # pages become chunks, the shorter system, task and call messages live turns
        chunk_min = min(len(engine.tokenize(site.page(p), bos=False)) for p in range(2 * steps + 2))
        sync_options = {"chat_template": CHAT_TEMPLATE, "tools": TOOLS, "chunk_min_tokens": chunk_min}
        entries = [({"role": "system", "content": SYSTEM}, "system"), ({"role": "user", "content": TASK}, "task")]

        def messages() -> list[dict]:
            return [m for m, _ in entries]

        def fits() -> bool:
            # the next call and the probe each have to fit after the window (and the generation prompt)
            prompt = engine.tokenize_chat(messages(), True, chat_template=CHAT_TEMPLATE, tools=TOOLS)
            return len(prompt) + max(CALL_TOKENS, len(probe)) <= positions

        report = None
        for step in range(steps):
            tool = tool_for_step(step)
            browser.step = step
            ep.begin_step(tool)
            if step == 0:
                ep.note_text("system", SYSTEM)
                ep.note_text("task", TASK)
                report = ep.sync(messages(), {k: note for k, (_, note) in enumerate(entries)}, **sync_options)
            g = ep.read(report.generation_prompt, CALL_TOKENS, tools=TOOLS, tool_choice=tool,
                        tool_call_format=TOOL_CALL_FORMAT)
            if len(g.tool_calls) != 1:
                raise RuntimeError(f"step {step}: expected one call to {tool}, got {g.text!r} ({g.stop_reason})")
            ep.note_text("call", describe_call(g.tool_calls[0]))
            page, label, text = browser.call(g.tool_calls[0])
            ep.current.label = label
            ep.note_text("page", text)
            add_result(entries, g.tool_calls, page, text)
            trim(entries, fits)
            report = ep.sync(messages(), {k: note for k, (_, note) in enumerate(entries)}, **sync_options)
            ep.end_step()
        title = f"web agent on {pathlib.Path(str(model)).name}: {steps} tool calls, policy {window.policy.name}"
        meta = {"model": str(model), "fingerprint": info.fingerprint, "policy": window.policy.name,
                "steps_requested": steps, "seed": seed, "keep": KEEP, "system": SYSTEM, "task": TASK,
                "tools": TOOLS, "probe_text": PROBE}
        return kit.finish(ep, window, out, meta, title)


# ---- served mode: the agent as an OpenAI client of `orbit serve` ------------------------------------------

# The client's think time after each answer, ms: the tool's run before the agent sends its next request. The
# server spends it on the session's idle work (the answer prefilled as the next request sends it back, audits);
# sent back to back (0), that work races the next request and the forward tokens vary run to run.
THINK_MS = 250.0


def audited(audit: dict) -> str:
    """The session's audits (the audit object of GET /v1/sessions/{id}) for the closing lines: their count and
    measured KL, or that nothing was audited (no mean of no measurement)."""
    audits = audit.get("audits", 0)
    # Requests read from exact KV lose nothing: the server samples only the others (usage.orbit.exact_kv).
    exact = f" ({audit['exact_kv_requests']} requests read exact KV)" if "exact_kv_requests" in audit else ""
    if not audits:
        return "nothing audited" + exact
    return (f"{audits} audits{exact}, mean measured KL {audit.get('measured_kl_sum', 0) / audits:.2e}, max "
            f"{audit.get('max_measured_kl', 0):.2e}, {audit.get('violations', 0)} past budget")


def run_served(url: str, *, steps: int = 32, seed: int = 0, out=None, session: str = "", quiet: bool = False,
               think_ms: float = THINK_MS) -> dict:
    """The web agent against an OpenAI-compatible orbit server at `url` (rendering with chat_template.jinja):
    one chat completion with tools per step, the whole message list each time, `think_ms` after each answer
    (the tool's run; 0 sends the next request as soon as the answer is read). Prints a table per step, orbit
    vs the radix cache and the session's audits; writes web-agent-served.report.json. Returns the report."""
    import json

    import chat_client

    out = pathlib.Path(out or kit.REPO / "out" / "web-agent")
    session = session or f"web-agent-{seed}-{uuid.uuid4().hex[:12]}"  # two clients started together get two
    client = chat_client.ChatClient(url, session=session)
    (model,) = client.models()[:1]
    positions = model.get("context_length") or 4096
    browser = Browser(Site(seed))
    entries = [({"role": "system", "content": SYSTEM}, "system"), ({"role": "user", "content": TASK}, "task")]
    rows, tokens_per_char = [], 1.0
    progress = None if quiet else kit.Progress(steps, "web-agent (served)")

    def fits() -> bool:  # the list's prompt as estimated from the tokens per character the server last reported
        chars = sum(len(json.dumps(m)) for m, _ in entries) + len(json.dumps(TOOLS))
        return tokens_per_char * chars + CALL_TOKENS <= positions

    for step in range(steps):
        tool = tool_for_step(step)
        browser.step = step
        messages = [m for m, _ in entries]
        t0 = time.perf_counter()
        try:
            answer = client.chat(model["id"], messages, max_tokens=CALL_TOKENS, tools=TOOLS,
                                 tool_choice={"type": "function", "function": {"name": tool}})
        except chat_client.ServerError as e:
            if e.code == "context_length_exceeded":
                sys.exit(f"error: {e}\n(is the server rendering with {CHAT_TEMPLATE_FILE}? start it with "
                         f"--chat-template {CHAT_TEMPLATE_FILE})")
            raise
        seconds = time.perf_counter() - t0
        usage, choice = answer["usage"], answer["choices"][0]
        calls = choice["message"].get("tool_calls") or []
        if len(calls) != 1:
            raise RuntimeError(f"step {step}: expected one call to {tool}, got {choice['message']!r}")
        page, label, text = browser.call(calls[0])
        tokens_per_char = usage["prompt_tokens"] / max(1, sum(len(json.dumps(m)) for m in messages)
                                                       + len(json.dumps(TOOLS)))
        rows.append({"step": step, "label": label, "tool": tool, "messages": len(messages), "seconds": seconds,
                     "prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                     "finish_reason": choice["finish_reason"], "call": calls[0], "page": page,
                     "orbit": usage.get("orbit")})
        add_result(entries, calls, page, text)
        trim(entries, fits)
        time.sleep(think_ms / 1e3)  # the tool runs (after the last call too: its idle work and audit finish)
        if progress:
            o = usage.get("orbit") or {}
            progress.update(1, f"{label}: fwd {o.get('forward_tokens', 0):.0f} radix {o.get('radix_cache_tokens', 0):.0f}")
    info = client.session_info()
    counters = client.metric_values(("orbit_audits_total", "orbit_audits_owed_total", "orbit_audits_dropped_total",
                                     "orbit_audits_waiting"))
    forward = sum((r["orbit"] or {}).get("forward_tokens", 0) for r in rows)
    radix = sum((r["orbit"] or {}).get("radix_cache_tokens", 0) for r in rows)
    idle = sum((r["orbit"] or {}).get("idle_forward_tokens", 0) for r in rows)
    head = f"{'step':>4}  {'what':<11} {'msgs':>4} {'prompt':>6} {'fwd tok':>7} {'radix':>6} {'ms':>7}  plan | call"
    lines = [f"web agent served by {url} (model {model['id']}, session {session}): {steps} tool calls", head,
             "-" * len(head)]
    for r in rows:
        o = r["orbit"] or {}
        lines.append(f"{r['step']:>4}  {r['label']:<11} {r['messages']:>4} {r['prompt_tokens']:>6} "
                     f"{o.get('forward_tokens', 0):>7.0f} {o.get('radix_cache_tokens', 0):>6.0f} "
                     f"{1e3 * r['seconds']:>7.1f}  {o.get('plan', '')} | {clip(describe_call(r['call']), 40)}")
    savings = info["savings"]
    lines += ["-" * len(head),
              f"client think time after each answer: {think_ms:.0f} ms (the tool's run; --think-ms 0 sends the "
              f"next request at once)",
              f"forward tokens (usage.orbit, summed): orbit {forward:.0f} vs the radix cache {radix:.0f} "
              f"({forward / radix if radix else float('nan'):.2f}x); {idle:.0f} more in idle time",
              f"served fidelity (GET /v1/sessions/{session}, audit): {audited(info.get('audit') or {})}; "
              f"server-wide (/metrics): {counters['orbit_audits_total']:.0f} audits, "
              f"{counters['orbit_audits_owed_total']:.0f} owed (run on a request's turn), "
              f"{counters['orbit_audits_dropped_total']:.0f} dropped, "
              f"{counters['orbit_audits_waiting']:.0f} waiting",
              f"GET /v1/sessions/{session}: {info['requests']} requests, orbit {savings['forward_tokens']:.0f} vs "
              f"radix {savings['radix_cache_tokens']:.0f} (ratio {savings['ratio']:.2f}, saved "
              f"{savings['saved_tokens']:.0f})"]
    print("\n".join(lines))
    report = {"url": url, "model": model, "session": session, "think_ms": think_ms, "steps": rows,
              "session_info": info, "audit_metrics": counters,
              "totals": {"forward_tokens": forward, "radix_cache_tokens": radix, "idle_forward_tokens": idle}}
    out.mkdir(parents=True, exist_ok=True)
    path = out / "web-agent-served.report.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"report: {path}")
    return report


def main(argv=None) -> int:
    ap = kit.arg_parser(__doc__.split("\n\n")[0], "web-agent", default_steps=32, short_steps=8)
    ap.add_argument("--server", metavar="URL",
                    help="drive an OpenAI-compatible orbit server at URL (e.g. http://127.0.0.1:8000) instead of "
                         "a window in this process")
    ap.add_argument("--serve", action="store_true",
                    help="start `orbit serve --model MODEL --port 0 --chat-template chat_template.jinja` on 127.0.0.1 "
                         "(with --policy), drive it, stop it")
    ap.add_argument("--orbit", default=str(kit.REPO / "build" / "cli" / "orbit"),
                    help="the orbit executable --serve runs (default: build/cli/orbit)")
    ap.add_argument("--session", default="", help="the X-Orbit-Session of the served mode (default: a new one)")
    ap.add_argument("--think-ms", type=float, default=None,
                    help=f"served mode: ms the client waits after each answer before its next request, the tool's "
                         f"run (default {THINK_MS:.0f}; 0 = back to back, when the server's idle work races the "
                         f"next request)")
    ap.add_argument("--audit", type=float, default=None,
                    help="--serve: the server's --audit RATE (the fraction of requests whose served logits are "
                         "measured against a re-prefill; the server's default 0.1)")
    args = ap.parse_args(argv)
    kit.check_args(ap, args)
    steps = 8 if args.short else args.steps
    if args.server and args.serve:
        ap.error("--server drives a server you started, --serve starts one: give one")
    served = args.server or args.serve
    # The served mode runs no window here: the options of the local run would be dropped without a word.
    local_only = [("--threads", args.threads != 0), ("--dump-logits", args.dump_logits)]
    if args.server:  # the server chose these when it started
        local_only += [("--policy", args.policy != ap.get_default("policy")),
                       ("--model", args.model != ap.get_default("model"))]
    given = [name for name, set_ in local_only if set_]
    if served and given:
        ap.error(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to the local run only "
                 f"(a window in this process){'; start your server with it' if args.server else ''}")
    if not (args.server or args.serve) and (args.think_ms is not None or args.audit is not None):
        ap.error("--think-ms and --audit apply to the served mode only (--serve or --server)")
    if args.server and args.audit is not None:
        ap.error("--audit is the server's option: start your server with it (--serve passes it)")
    if args.think_ms is not None and args.think_ms < 0:
        ap.error("--think-ms must be 0 or more")
    think_ms = THINK_MS if args.think_ms is None else args.think_ms
    if args.server or args.serve:
        import chat_client

        if args.server:
            try:
                run_served(args.server, steps=steps, seed=args.seed, out=args.out, session=args.session,
                           quiet=args.quiet, think_ms=think_ms)
            except chat_client.ServerUnreachable as e:
                sys.exit(f"error: --server: {e}")
            return 0
        if not pathlib.Path(args.orbit).is_file():
            sys.exit(f"error: --orbit: no executable at {args.orbit} (build it: ./scripts/main.sh)")
        try:
            with chat_client.OrbitServer(args.orbit, args.model, policy=args.policy, audit=args.audit,
                                         chat_template=str(CHAT_TEMPLATE_FILE)) as server:
                run_served(server.url, steps=steps, seed=args.seed, out=args.out, session=args.session,
                           quiet=args.quiet, think_ms=think_ms)
        except chat_client.ServeUnavailable as e:
            sys.exit(f"error: {e}")
        return 0
    orbit = kit.import_orbit()
    try:
        result = run(args.model, steps=steps, policy=args.policy, out=args.out, seed=args.seed,
                     threads=args.threads, dump_logits=args.dump_logits, quiet=args.quiet)
    except orbit.OrbitError as e:  # a missing model, a bad policy: the library names what is at fault
        sys.exit(f"error: {e}")
    kit.print_outputs(result["paths"], args.model)
    return 0


if __name__ == "__main__":
    sys.exit(main())

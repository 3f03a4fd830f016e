// `orbit serve` driven by the official `openai` npm client, as an agent framework drives a chat API.
//
//   node serve_openai.mjs ORBIT_BINARY MODEL_DIR
//
// Starts `orbit serve` on 127.0.0.1 (a free port) under the exact policy, then runs a tool loop in one
// session: the agent asks, calls a tool whose long result is appended, asks again, reads a second file,
// trims the first exchange from its history, re-reads the first file, asks once more; turns alternate
// between streamed and whole responses. Every answer must equal `orbit generate --no-bos` on the same
// rendering at temperature 0 (the built-in chat template: BOS text, the tools block, "role: content\n" per
// message with an assistant's tool calls as <tool_call>{json}</tool_call>, "assistant:"), and every usage must hold prompt_tokens equal to that rendering's token count and a
// usage.orbit whose plan says what the history edit was (admit, evict, recall), with forward tokens
// below the prompt where the window reused KV. The session's report and /metrics must sum the same
// counts. Then errors through the client (unknown model, unknown role, max_tokens past the context), a
// stream cut midway (the server counts it cancelled and keeps serving), and SIGTERM (drains, exit 0).
//
// Exit status: 0 all passed, 1 a check failed, 77 skipped (the openai package or the server is missing).
// The reference runs (`orbit generate`, `orbit tokenize`) are asynchronous child processes, so the event loop
// never stops while the client holds an idle keep-alive socket; the server is always stopped, also when a
// check throws.
import { execFile } from "node:child_process";
import { promisify } from "node:util";

import { checks, importOr, scriptArgs, startServer } from "./serve_harness.mjs";

const run = promisify(execFile);
const [orbit, model] = scriptArgs("serve_openai.mjs", "ORBIT_BINARY MODEL_DIR");
const { default: OpenAI } = await importOr("openai");

const t = checks();
const check = t.check;
const MAX_TOKENS = 12;
const BOS_TEXT = "<|start_story|>";
const env = { ...process.env, OMP_NUM_THREADS: "1" };

const server = startServer(orbit, ["--model", model, "--policy", "patch:16:exact"]);
const base = await server.ready();
try {
  await main();
} catch (e) {
  check(false, "the test ran to its end", e.stack ?? String(e));
} finally {
  await server.stop(check);  // SIGTERM: the server drains and must exit 0
}
t.finish();

async function main() {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });
  const modelId = (await client.models.list()).data[0].id;
  check(modelId === model.replace(/\/+$/, "").split("/").pop(), "/v1/models lists the model", modelId);

  // ---- the reference: orbit generate on the rendering ----
  const tools = [{ type: "function", function: { name: "read_file", parameters: { type: "object" } } }];
  // JSON as the template's tojson writes it (Python's json.dumps: ", " and ": " between items).
  function tojson(v) {
    if (Array.isArray(v)) return `[${v.map(tojson).join(", ")}]`;
    if (v !== null && typeof v === "object") {
      return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${tojson(x)}`).join(", ")}}`;
    }
    return JSON.stringify(v);
  }
  function render(messages) {
    const toolsBlock = "system: You may call these tools. To call one, answer with <tool_call>{\"name\": <the tool's " +
      "name>, \"arguments\": <its arguments as a JSON object>}</tool_call>.\n<tools>" +
      tools.map((t) => `\n${tojson(t)}`).join("") + "\n</tools>\n";
    const calls = (m) => (m.tool_calls ?? []).map((c) =>
      `<tool_call>{"name": ${tojson(c.function.name)}, "arguments": ${tojson(JSON.parse(c.function.arguments))}}</tool_call>`)
      .join("");
    return BOS_TEXT + toolsBlock + messages.map((m) => `${m.role}: ${m.content ?? ""}${calls(m)}\n`).join("") +
      "assistant:";
  }
  async function reference(messages) {
    const { stdout } = await run(
      orbit,
      ["generate", "--model", model, "--prompt", render(messages), "--no-bos", "--max-tokens", String(MAX_TOKENS), "--json"],
      { env, encoding: "utf8" },
    );
    return JSON.parse(stdout).text;
  }
  async function tokenCount(text) {
    const { stdout } = await run(orbit, ["tokenize", "--model", model, "--text", text, "--no-bos"], { env, encoding: "utf8" });
    return JSON.parse(stdout).tokens.length;
  }

  // One agent turn in the session: streamed or not, the answer and usage checked.
  const SESSION = "agent-loop";
  const totals = { requests: 0, forward: 0, radix: 0, prompt: 0, completion: 0, idle: 0 };
  async function turn(messages, stream, label) {
    const request = { model: modelId, messages, tools, max_tokens: MAX_TOKENS, temperature: 0 };
    const options = { headers: { "X-Orbit-Session": SESSION } };
    let text = "";
    let usage;
    let finish;
    if (stream) {
      const chunks = await client.chat.completions.create(
        { ...request, stream: true, stream_options: { include_usage: true } },
        options,
      );
      for await (const chunk of chunks) {
        if (chunk.choices.length > 0) {
          text += chunk.choices[0].delta.content ?? "";
          finish = chunk.choices[0].finish_reason ?? finish;
        }
        if (chunk.usage) usage = chunk.usage;
      }
    } else {
      const r = await client.chat.completions.create(request, options);
      text = r.choices[0].message.content;
      finish = r.choices[0].finish_reason;
      usage = r.usage;
    }
    const want = await reference(messages);
    check(text === want, `${label}: the answer equals orbit generate on the rendering`,
          `server ${JSON.stringify(text)}\n  generate ${JSON.stringify(want)}`);
    check(finish === "length" || finish === "stop", `${label}: finish_reason`, finish);
    check(usage !== undefined && usage.orbit !== undefined, `${label}: usage.orbit is present`);
    if (!usage?.orbit) return { text, usage: { orbit: {} } };
    const promptTokens = await tokenCount(render(messages));
    check(usage.prompt_tokens === promptTokens, `${label}: prompt_tokens is the rendering's token count`,
          `${usage.prompt_tokens} vs ${promptTokens}`);
    check(usage.completion_tokens >= 1 && usage.completion_tokens <= MAX_TOKENS, `${label}: completion_tokens`);
    const o = usage.orbit;
    check(o.session === SESSION, `${label}: usage.orbit.session`);
    check(Number.isFinite(o.forward_tokens) && o.forward_tokens >= 1 && o.forward_tokens <= promptTokens,
          `${label}: 1 <= forward_tokens <= prompt_tokens`, JSON.stringify(o));
    check(Number.isInteger(o.radix_cache_tokens) && o.radix_cache_tokens >= 0 && o.radix_cache_tokens <= promptTokens,
          `${label}: 0 <= radix_cache_tokens <= prompt_tokens`, JSON.stringify(o));
    check(typeof o.plan === "string" && o.plan.length > 0, `${label}: usage.orbit.plan`);
    check(Number.isFinite(o.idle_forward_tokens) && o.idle_forward_tokens >= 0, `${label}: usage.orbit.idle_forward_tokens`);
    check(Number.isFinite(o.predicted_kl) && o.predicted_kl >= 0 && o.predicted_kl < 1e-3,
          `${label}: predicted_kl under the exact policy`, String(o.predicted_kl));
    totals.requests++;
    totals.forward += o.forward_tokens;
    totals.idle += o.idle_forward_tokens;
    totals.radix += o.radix_cache_tokens;
    totals.prompt += usage.prompt_tokens;
    totals.completion += usage.completion_tokens;
    console.log(`${label}: ${stream ? "streamed" : "whole"}, prompt ${usage.prompt_tokens}, orbit ${o.forward_tokens} ` +
                `(+${o.idle_forward_tokens} idle), ` +
                `radix ${o.radix_cache_tokens}, plan ${o.plan}, answer ${JSON.stringify(text)}`);
    return { text, usage };
  }

  // ---- the tool loop ----
  const FILE_1 = "The dog found a big red ball in the park. Lily was happy. She threw the ball and the dog ran " +
    "after it. They played all day in the sun until the sky was pink and it was time to go home.";
  const FILE_2 = "Tom had a small boat. He took it to the pond with his mom. The boat went fast on the water and " +
    "a duck swam after it. Tom laughed and the duck said quack. Then it began to rain and they ran home.";
  const toolCall = (id, path) => ({
    role: "assistant",
    content: "",
    tool_calls: [{ id, type: "function", function: { name: "read_file", arguments: JSON.stringify({ path }) } }],
  });

  const messages = [
    { role: "system", content: "You tell short stories." },
    { role: "user", content: "What did the dog find?" },
  ];
  let r = await turn(messages, false, "turn 1 (first read)");
  check(r.usage.orbit.forward_tokens === r.usage.prompt_tokens, "turn 1: a fresh window forwards the whole prompt");
  messages.push(toolCall("call_1", "ball.txt"), { role: "tool", tool_call_id: "call_1", content: FILE_1 });
  r = await turn(messages, true, "turn 2 (tool result 1)");
  check(/admit|turn/.test(r.usage.orbit.plan) && /keep/.test(r.usage.orbit.plan), "turn 2: keeps the history, adds the tool result",
        r.usage.orbit.plan);
  check(r.usage.orbit.forward_tokens < r.usage.prompt_tokens, "turn 2: forwards less than the prompt");
  messages.push({ role: "assistant", content: r.text }, { role: "user", content: "And the boat?" });
  messages.push(toolCall("call_2", "boat.txt"), { role: "tool", tool_call_id: "call_2", content: FILE_2 });
  r = await turn(messages, false, "turn 3 (tool result 2)");
  check(r.usage.orbit.forward_tokens < r.usage.prompt_tokens, "turn 3: forwards less than the prompt");
  // Trim: the first tool exchange leaves the history.
  const trimmed = messages.filter((m) => m.tool_call_id !== "call_1" && m.tool_calls?.[0]?.id !== "call_1");
  r = await turn(trimmed, true, "turn 4 (trimmed)");
  // (Also evicted: an answer the server prefilled in idle time that the agent replaced by its tool call.)
  check(Number((r.usage.orbit.plan.match(/evict (\d+)/) ?? [])[1]) >= 2, "turn 4: the trimmed exchange is evicted",
        r.usage.orbit.plan);
  // Re-read: the first file comes back at the end.
  const reread = [...trimmed, toolCall("call_3", "ball.txt"), { role: "tool", tool_call_id: "call_3", content: FILE_1 }];
  r = await turn(reread, false, "turn 5 (re-read)");
  // (The call that reads it again renders as the trimmed call did, ids aside: it comes back from the store too.)
  check(/recall [12]/.test(r.usage.orbit.plan), "turn 5: the re-read file is recalled from the store", r.usage.orbit.plan);
  reread.push({ role: "assistant", content: r.text }, { role: "user", content: "Which story was better?" });
  r = await turn(reread, true, "turn 6 (question)");
  check(r.usage.orbit.forward_tokens < r.usage.prompt_tokens, "turn 6: forwards less than the prompt");

  // ---- the session's report and /metrics agree with the usages ----
  const near = (a, b) => Math.abs(a - b) < 1e-6;
  const info = await (await fetch(`${base}/v1/sessions/${SESSION}`)).json();
  check(info.requests === totals.requests, "session: requests", `${info.requests} vs ${totals.requests}`);
  check(near(info.savings.forward_tokens, totals.forward), "session: forward tokens sum the usages");
  check(info.savings.radix_cache_tokens === totals.radix, "session: radix tokens sum the usages");
  check(info.resident === true && info.window.tokens > 0, "session: resident with a window");
  const metrics = await (await fetch(`${base}/metrics`)).text();
  const metric = (name) => Number((metrics.match(new RegExp(`^${name} (\\S+)$`, "m")) ?? [])[1]);
  check(near(metric("orbit_forward_tokens_total"), totals.forward), "metrics: orbit_forward_tokens_total");
  check(metric("orbit_radix_cache_tokens_total") === totals.radix, "metrics: orbit_radix_cache_tokens_total");
  check(metric("orbit_prompt_tokens_total") === totals.prompt, "metrics: orbit_prompt_tokens_total");
  check(/orbit_request_seconds_bucket\{endpoint="chat",le="\+Inf"\} 6/.test(metrics), "metrics: latency histogram");
  console.log(`tool loop: orbit ${totals.forward} forward tokens (+${totals.idle} in idle time), radix cache ` +
              `${totals.radix}, prompts ${totals.prompt}`);

  // ---- errors through the client ----
  async function status(promise) {
    try {
      await promise;
      return 200;
    } catch (e) {
      return e.status ?? -1;
    }
  }
  check(await status(client.chat.completions.create({ model: "gpt-4", messages })) === 404, "unknown model: 404");
  check(await status(client.chat.completions.create({ model: modelId, messages: [{ role: "robot", content: "hi" }] })) === 400,
        "unknown role: 400");
  check(await status(client.chat.completions.create({ model: modelId, messages, max_tokens: 100000 })) === 400,
        "max_tokens past the context: 400");
  check((await fetch(`${base}/v1/sessions/nobody`)).status === 404, "unknown session: 404");

  // ---- a stream cut midway ----
  // The server writes as it decodes, never waiting for the client to read: an answer the connection can
  // buffer whole (a plain 400-token one is ~80 KB) may be all written, and the run ended, before a client
  // process the machine schedules late reads its second chunk, and nothing is left to cut. 16 choices with
  // 20 top log probabilities per token are ~11 MB, more than loopback TCP buffers (4 MB send buffer at most
  // by default, the receiver's window while it does not read): the server is still writing when the client
  // cuts, however late that comes.
  const abort = new AbortController();
  const cut = await client.chat.completions.create(
    {
      model: modelId, messages: messages.slice(0, 2), max_tokens: 400, temperature: 0, stream: true, n: 16,
      logprobs: true, top_logprobs: 20,
    },
    { signal: abort.signal, headers: { "X-Orbit-Session": "cut" } },
  );
  let pieces = 0;
  try {
    for await (const chunk of cut) {
      void chunk;
      if (++pieces === 2) abort.abort();
    }
  } catch (e) {
    void e;  // the abort
  }
  let cancelled = 0;
  for (let i = 0; i < 100 && cancelled < 1; i++) {
    await new Promise((res) => setTimeout(res, 100));
    cancelled = Number(((await (await fetch(`${base}/metrics`)).text()).match(/^orbit_cancelled_total (\S+)$/m) ?? [])[1]);
  }
  check(cancelled >= 1, "a stream cut midway is cancelled", `orbit_cancelled_total ${cancelled}`);
  const after = await turn(reread, false, "after the cut");
  check(after.text.length > 0, "the server serves after a cut stream");
}

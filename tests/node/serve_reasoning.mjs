// `orbit serve --reasoning-parser qwen3` read by the clients that show reasoning: the AI SDK
// (@ai-sdk/openai-compatible reads message.reasoning_content and delta.reasoning_content into reasoning parts,
// and sends them back as the assistant's reasoning_content) and the openai client's Responses API (a reasoning
// output item, response.reasoning_text.delta events). The model (stories260K) never writes <think>, so the
// server renders under a template whose generation prompt opens it: the whole answer is reasoning.
//
//   node serve_reasoning.mjs ORBIT_BINARY MODEL        exit 77 = skipped (node packages or serve missing)
import { fileURLToPath } from "node:url";

import { checks, importOr, scriptArgs, startServer } from "./serve_harness.mjs";
import { recordingFetch } from "./serve_tool_rounds.mjs";

const [orbit, model] = scriptArgs("serve_reasoning.mjs", "ORBIT_BINARY MODEL");
const ai = await importOr("ai");
const { createOpenAICompatible } = await importOr("@ai-sdk/openai-compatible");
const { default: OpenAI } = await importOr("openai");

// ChatML whose generation prompt opens <think> (tests/python/test_serve_reasoning_parser.py serves it too).
const TEMPLATE = fileURLToPath(new URL("../data/think_open.jinja", import.meta.url));

const t = checks();
const server = startServer(orbit, ["--model", model, "--chat-template", TEMPLATE, "--reasoning-parser", "qwen3"]);
const modelId = model.split("/").pop();
try {
  const base = await server.ready();
  const settings = { maxOutputTokens: 16, seed: 5, maxRetries: 0 };
  const { sent, fetch } = recordingFetch();
  const provider = createOpenAICompatible({ name: "orbit", baseURL: `${base}/v1`, apiKey: "unused", fetch });

  const whole = await ai.generateText({ model: provider(modelId), prompt: "Tell me a story.", ...settings });
  t.check(whole.reasoningText?.length > 5 && whole.text === "", "aisdk generateText: the answer is reasoning",
          JSON.stringify({ reasoning: whole.reasoningText, text: whole.text }));
  t.check(whole.usage.outputTokenDetails?.reasoningTokens === 16,
          "aisdk generateText: reasoning tokens in the usage", JSON.stringify(whole.usage));

  const streamed = ai.streamText({ model: provider(modelId), prompt: "Tell me a story.", ...settings });
  let reasoning = "";
  let pieces = 0;
  for await (const part of streamed.fullStream) {
    if (part.type === "reasoning-delta") {
      reasoning += part.text;
      pieces++;
    }
  }
  t.check(reasoning === whole.reasoningText && pieces > 2, "aisdk streamText: the reasoning streams as generated",
          JSON.stringify({ reasoning, pieces }));

  // The answer sent back: the SDK's messages carry the reasoning, the server takes it as reasoning_content.
  const messages = [{ role: "user", content: "Tell me a story." }, ...whole.response.messages,
                    { role: "user", content: "And then?" }];
  const next = await ai.generateText({ model: provider(modelId), messages, ...settings, maxOutputTokens: 2 });
  const round2 = sent[sent.length - 1];
  const assistant = round2.body.messages.find((m) => m.role === "assistant");
  t.check(round2.status === 200 && assistant?.reasoning_content === whole.reasoningText,
          "aisdk: the reasoning goes back as reasoning_content and is answered", JSON.stringify(round2));
  t.check(next.usage.inputTokens > whole.usage.inputTokens + 10, "aisdk: the template rendered it",
          JSON.stringify([whole.usage, next.usage]));

  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
  const response = await client.responses.create({ model: modelId, input: "Tell me a story.", max_output_tokens: 16,
                                                   seed: 5 });
  const item = response.output[0];
  t.check(item?.type === "reasoning" && item.content?.[0]?.type === "reasoning_text" &&
          item.content[0].text === whole.reasoningText,
          "openai responses: a reasoning item holds the reasoning", JSON.stringify(response.output));
  t.check(response.usage.output_tokens_details.reasoning_tokens === 16, "openai responses: reasoning tokens",
          JSON.stringify(response.usage));
  const events = await client.responses.create({ model: modelId, input: "Tell me a story.", max_output_tokens: 16,
                                                 seed: 5, stream: true });
  let text = "";
  let done;
  for await (const e of events) {
    if (e.type === "response.reasoning_text.delta") text += e.delta;
    if (e.type === "response.reasoning_text.done") done = e.text;
  }
  t.check(text === whole.reasoningText && done === text, "openai responses: reasoning_text events",
          JSON.stringify({ text, done }));
} finally {
  await server.stop(t.check);
}
t.finish();

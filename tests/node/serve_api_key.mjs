// `orbit serve --api-key KEY` driven by the official `openai` npm client, which sends its apiKey as
// `Authorization: Bearer KEY`.
//
//   node serve_api_key.mjs ORBIT_BINARY MODEL
//
// With the server's key the client lists the models, gets a whole and a streamed chat answer and a Responses
// answer; with another key (or none the server knows) every call fails with the client's AuthenticationError:
// status 401, code invalid_api_key, a message that says what is wrong and does not echo the key.
//
// Exit status: 0 all passed, 1 a check failed, 77 skipped (the openai package or the server is missing). The
// server is always stopped, also when a check throws.
import { checks, importOr, scriptArgs, startServer } from "./serve_harness.mjs";

const [orbit, model] = scriptArgs("serve_api_key.mjs", "ORBIT_BINARY MODEL");
const { default: OpenAI } = await importOr("openai");

const t = checks();
const check = t.check;
const KEY = "sk-orbit-node-5e1d";
const server = startServer(orbit, ["--model", model, "--api-key", KEY]);
const base = await server.ready();
try {
  await main();
} catch (e) {
  check(false, "the test ran to its end", e.stack ?? String(e));
} finally {
  await server.stop(check);
}
t.finish();

async function main() {
  check(!server.stderr().includes(KEY), "the key is not printed at start", server.stderr());
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
  const modelId = (await client.models.list()).data[0].id;
  check(typeof modelId === "string" && modelId.length > 0, "with the key: /v1/models lists the model", modelId);
  const messages = [{ role: "user", content: "Once upon a time" }];
  const whole = await client.chat.completions.create({ model: modelId, messages, max_tokens: 4, temperature: 0 });
  check(whole.choices[0].message.content.length > 0, "with the key: a whole chat answer", JSON.stringify(whole));
  let streamed = "";
  const stream = await client.chat.completions.create({ model: modelId, messages, max_tokens: 4, temperature: 0,
                                                       stream: true });
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
  check(streamed === whole.choices[0].message.content, "with the key: the streamed answer equals the whole one",
        `${JSON.stringify(streamed)} vs ${JSON.stringify(whole.choices[0].message.content)}`);
  const response = await client.responses.create({ model: modelId, input: "Once upon a time", max_output_tokens: 4 });
  check(response.status === "incomplete" && response.output_text.length > 0,
        "with the key: a Responses answer (cut at max_output_tokens)", JSON.stringify(response));

  const wrong = new OpenAI({ baseURL: `${base}/v1`, apiKey: "sk-not-this-one", maxRetries: 0, timeout: 60000 });
  const calls = {
    "models.list": () => wrong.models.list(),
    "chat.completions.create": () => wrong.chat.completions.create({ model: modelId, messages, max_tokens: 4 }),
    "chat.completions.create (stream)": async () => {
      for await (const _ of await wrong.chat.completions.create({ model: modelId, messages, stream: true })) {
        // no chunk is expected
      }
    },
    "responses.create": () => wrong.responses.create({ model: modelId, input: "Hi" }),
  };
  for (const [name, call] of Object.entries(calls)) {
    try {
      await call();
      check(false, `a wrong key: ${name} fails`, "it succeeded");
    } catch (e) {
      check(e instanceof OpenAI.AuthenticationError, `a wrong key: ${name} throws AuthenticationError`, String(e));
      check(e.status === 401 && e.code === "invalid_api_key" && e.type === "invalid_request_error",
            `a wrong key: ${name} is 401 invalid_api_key`, `${e.status} ${e.code} ${e.type}`);
      check(/Incorrect API key provided/.test(e.message) && !e.message.includes("sk-not-this-one"),
            `a wrong key: ${name}'s message says so without the key`, e.message);
    }
  }
  // Health stays open to a client without any key.
  const health = await fetch(`${base}/health`);
  check(health.status === 200, "/health needs no key", String(health.status));
}

// The reference side of tests/cpp/test_chat_template_oracle.cpp: @huggingface/jinja (the JavaScript
// engine Hugging Face renders chat templates with) renders each job the test asks for.
//
//   node chat_template_oracle.mjs REQUEST_JSON
//
// REQUEST_JSON: {"templates": {name: source}, "jobs": [{"template": name, "vars": {variables}}...]}
// stdout:       [{"text": rendering} or {"error": message}...], one per job
// Exit status 3 when the package cannot be loaded (the test then reports skipped).
import { readFileSync } from "node:fs";

let Template;
try {
  ({ Template } = await import("@huggingface/jinja"));
} catch (e) {
  process.stderr.write(`cannot load @huggingface/jinja: ${e.message}\n`);
  process.exit(3);
}

const request = JSON.parse(readFileSync(process.argv[2], "utf8"));
const compiled = {};
for (const [name, source] of Object.entries(request.templates)) compiled[name] = new Template(source);
const results = request.jobs.map((job) => {
  try {
    return { text: compiled[job.template].render(job.vars) };
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
});
process.stdout.write(JSON.stringify(results));

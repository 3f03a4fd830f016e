// What the Node tests of `orbit serve` share: pass/fail counting, and the server they start themselves on
// 127.0.0.1 (a free port) and always stop.
//
//   const [orbit, model] = scriptArgs("serve_x.mjs", "ORBIT_BINARY MODEL");   // exits 2 with the usage
//   const { default: OpenAI } = await importOr("openai");   // the module; exits 77 (skipped) when missing
//   const t = checks();                       // t.check(ok, what, detail); t.finish() exits 0 or 1
//   const server = startServer(orbit, ["--model", model]);
//   const base = await server.ready();        // "http://127.0.0.1:PORT"; exits 77 (skipped) for an orbit
//                                             // built without cpp-httplib, 1 when the server fails to start
//   ... finally { await server.stop(t.check); }   // SIGTERM: drains and must exit 0 (SIGKILL after 20 s)
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

export const SKIP = 77;

// The script's arguments, as many as `usage` names; when one is missing, the usage on stderr and exit 2.
export function scriptArgs(script, usage) {
  const names = usage.split(" ");
  const args = process.argv.slice(2, 2 + names.length);
  if (args.length < names.length || args.some((a) => !a)) {
    console.error(`usage: node ${script} ${usage}`);
    process.exit(2);
  }
  return args;
}

// An npm package's module; when it is not installed, says so and exits 77, so the test reports skipped.
export async function importOr(name, what = `the ${name} package`) {
  try {
    return await import(name);
  } catch (e) {
    console.log(`SKIPPED: ${what} is not installed (npm install in tests/node): ${e.message}`);
    process.exit(SKIP);
  }
}

export function checks() {
  let passed = 0;
  let failed = 0;
  return {
    check(ok, what, detail = "") {
      if (ok) {
        passed++;
      } else {
        failed++;
        console.log(`FAILED: ${what}${detail ? `\n  ${detail}` : ""}`);
      }
    },
    finish() {
      console.log(`${passed} passed, ${failed} failed`);
      process.exit(failed === 0 ? 0 : 1);
    },
  };
}

export function startServer(orbit, args) {
  const server = spawn(orbit, ["serve", "--port", "0", ...args], {
    env: { ...process.env, OMP_NUM_THREADS: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  server.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) => server.on("exit", (code, signal) => resolve({ code, signal })));
  process.on("exit", () => server.exitCode === null && server.kill("SIGKILL"));
  const listening = new Promise((resolve, reject) => {
    createInterface({ input: server.stdout }).on("line", (line) => {
      const m = line.match(/listening on (http:\/\/[^\s]+)/);
      if (m) resolve(m[1]);
    });
    server.on("exit", (code) => reject(new Error(`orbit serve exited with ${code}: ${stderr}`)));
  });
  return {
    stderr: () => stderr,
    async ready() {
      try {
        return await listening;
      } catch (e) {
        if (/built without cpp-httplib/.test(e.message)) {
          console.log("SKIPPED: this orbit was built without cpp-httplib (no `orbit serve`)");
          process.exit(SKIP);
        }
        console.log(`FAILED: the server did not start: ${e.message}`);
        process.exit(1);
      }
    },
    async stop(check) {
      if (server.exitCode !== null) return;
      server.kill("SIGTERM");
      const end = await Promise.race([exited, new Promise((res) => setTimeout(() => res({ code: "timeout" }), 20000))]);
      if (end.code === "timeout") server.kill("SIGKILL");
      check(end.code === 0, "SIGTERM: the server drains and exits 0", `${JSON.stringify(end)} ${stderr.slice(-2000)}`);
    },
  };
}

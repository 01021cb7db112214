// Runs the client scripts of this folder in one warm Node process, for tests/support/node.py:
// importing a client package costs most of a second of CPU, paid here once per test process
// instead of once per script run.
//   node runner.mjs <unix socket path>
// Prints "ready" once listening. Each connection sends one JSON line {script, args, env} and gets
// one JSON line back, {code, stdout, stderr}, once the script's top-level code has finished: the
// script runs as a fresh module (its packages stay loaded), with that argv and environment, and
// what it logs is its output. A thrown error is exit code 1 with its stack on stderr, as a
// script run by itself would end. One run at a time. The end of standard input ends the runner.
import { createServer } from "node:net";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { format } from "node:util";

const [socketPath] = process.argv.slice(2);
const here = path.dirname(new URL(import.meta.url).pathname);
const ready = console.log.bind(console);
let current = null; // the run's output: {out: [], err: []}; what is logged between runs is dropped
let runs = 0;

console.log = console.info = (...values) => void current?.out.push(format(...values));
console.error = console.warn = (...values) => void current?.err.push(format(...values));
const late = (error) => current?.err.push(String(error?.stack ?? error));
process.on("unhandledRejection", late);
process.on("uncaughtException", late);

async function run({ script, args, env }) {
  const argv = process.argv;
  const saved = { ...process.env };
  const file = path.join(here, path.basename(script));
  for (const name of Object.keys(process.env)) delete process.env[name];
  Object.assign(process.env, env);
  process.argv = [argv[0], file, ...args];
  current = { out: [], err: [] };
  let code = 0;
  try {
    await import(`${pathToFileURL(file).href}?run=${++runs}`);
  } catch (error) {
    current.err.push(String(error?.stack ?? error));
    code = 1;
  } finally {
    process.argv = argv;
    for (const name of Object.keys(process.env)) delete process.env[name];
    Object.assign(process.env, saved);
  }
  const done = current;
  current = null;
  return { code, stdout: done.out.join("\n") + "\n", stderr: done.err.join("\n") };
}

let queue = Promise.resolve();
const server = createServer((socket) => {
  let request = "";
  socket.setEncoding("utf8");
  socket.on("data", (chunk) => {
    request += chunk;
    if (!request.includes("\n")) return;
    queue = queue.then(async () => {
      const reply = await run(JSON.parse(request));
      socket.end(JSON.stringify(reply) + "\n");
    });
  });
  socket.on("error", () => {});
});
server.listen(socketPath, () => ready("ready"));
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();

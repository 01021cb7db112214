// Prints the installed version of every client package.json pins, and the Node running it.
import { readFileSync } from "node:fs";

const pins = JSON.parse(readFileSync(new URL("./package.json", import.meta.url))).dependencies;
const installed = {};
for (const name of Object.keys(pins)) {
  const manifest = new URL(`./node_modules/${name}/package.json`, import.meta.url);
  installed[name] = JSON.parse(readFileSync(manifest)).version;
}
console.log(JSON.stringify({ node: process.versions.node, installed, pins }));

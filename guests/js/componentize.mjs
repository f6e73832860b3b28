// Builds one staged handler into a component with the componentize-qjs API
// (the QuickJS engine; the same call `jco componentize --backend qjs` makes,
// without jco's other dependencies). build.sh runs it; see README.md.
//
//   node componentize.mjs WIT_DIR STAGE_DIR OUT.wasm
//
// STAGE_DIR holds entry.js (the SDK's entry module), app/ (the handler's
// folder) and node_modules/rheo-handler/ (the SDK); it is the module root,
// so `import ... from "rheo-handler"` resolves there.

import { componentize } from "componentize-qjs";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const [witDir, stage, out] = process.argv.slice(2);
if (!out) {
  console.error("usage: node componentize.mjs WIT_DIR STAGE_DIR OUT.wasm");
  process.exit(1);
}
const entry = join(stage, "entry.js");
try {
  const { component } = await componentize({
    witPath: witDir,
    world: "handler",
    jsSource: readFileSync(entry, "utf8"),
    jsPath: entry,
    moduleRoot: stage,
    // The host runs components without the component-model async ABI.
    sync: true,
  });
  writeFileSync(out, component);
} catch (error) {
  console.error(String(error?.message ?? error).replace(/^:\s*/, "").trimEnd());
  process.exit(1);
}

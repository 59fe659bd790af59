import { fileURLToPath } from "node:url";

// Tests run compiled, from dist/test/support/.
export const packageRoot = fileURLToPath(new URL("../../../", import.meta.url));
export const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
export const cliPath = `${packageRoot}dist/src/cli.js`;
export const exampleHistory = `${packageRoot}examples/agent-session.json`;

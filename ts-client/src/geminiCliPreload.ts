import { register } from "node:module";
import { pathToFileURL } from "node:url";

/**
 * Loaded with `node --import` by `ctxopt-gemini` ahead of Gemini CLI: installs
 * the loader hooks that wrap its content generator factory. Gemini CLI
 * relaunches itself with the same `execArgv`, so the child gets them too.
 */
const bundleDir = process.env["CTXOPT_GEMINI_BUNDLE_DIR"];
if (bundleDir !== undefined && bundleDir !== "") {
  register(new URL("./geminiCliLoader.js", import.meta.url), {
    data: {
      hookUrl: new URL("./geminiCliHook.js", import.meta.url).href,
      bundleDir: pathToFileURL(bundleDir.endsWith("/") ? bundleDir : `${bundleDir}/`).href,
    },
  });
}

// Gemini CLI's own choice of what to keep verbatim, for benchmarks/quality.
//
// stdin:  {"items": [{"contents": Content[], "preserve": [fraction, ...]}, ...]}
// stdout: {"items": [{"splits": [index, ...], "ms": [ms, ...]}, ...]}
//
// For each preserve fraction, the index where Gemini CLI's compression would
// split the history: contents[index:] stay verbatim, the rest would be
// summarised by an LLM. The CLI calls findCompressSplitPoint(history,
// 1 - preserveFraction); version 0.61.0 does not re-export it from the package
// root, hence the deep import.
import { findCompressSplitPoint } from '@google/gemini-cli-core/dist/src/context/chatCompressionService.js';

function splitPoint(contents, preserve) {
  if (preserve >= 1) return 0; // everything fits: nothing to compress
  if (preserve <= 0) return contents.length; // no room: nothing stays verbatim
  return findCompressSplitPoint(contents, 1 - preserve);
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const { items } = JSON.parse(Buffer.concat(chunks).toString('utf8'));

const answers = items.map(({ contents, preserve }) => {
  const splits = [];
  const ms = [];
  for (const fraction of preserve) {
    const started = performance.now();
    splits.push(splitPoint(contents, fraction));
    ms.push(performance.now() - started);
  }
  return { splits, ms };
});
process.stdout.write(JSON.stringify({ items: answers }));

// Reads JSON {name: [texts]} on stdin, prints {name: [[o200k, cl100k], ...]}.
const o200k = require('gpt-tokenizer/cjs/encoding/o200k_base');
const cl100k = require('gpt-tokenizer/cjs/encoding/cl100k_base');
let input = '';
process.stdin.on('data', d => input += d);
process.stdin.on('end', () => {
  const data = JSON.parse(input);
  const out = {};
  for (const [k, texts] of Object.entries(data)) {
    out[k] = texts.map(t => [o200k.encode(t).length, cl100k.encode(t).length]);
  }
  console.log(JSON.stringify(out));
});

/**
 * Compiles the code blocks of the README and docs/js-api.md as an app's build would, in the fresh
 * app of scripts/pack-test.sh (run there with node, from the app's folder):
 *
 *   node compile-docs.js ROOT
 *
 * - writes the docs' `babel.config.js` block and their tsconfig block (the one extending
 *   @react-native/typescript-config) as the app's files;
 * - compiles every ts / tsx / js block with @babel/core and that config (React Native's preset
 *   plus the explicit-resource-management plugin): the imports stay at the top, the rest of
 *   the block becomes the body of an async function (blocks use await and free variables);
 * - checks that React Native's preset alone refuses `await using` with the message the docs
 *   quote (so the plugin is what makes it compile).
 *
 * Prints one line per block and "N passed, M failed"; exits non-zero on a failure.
 */
'use strict';

const fs = require('fs');
const path = require('path');
const babel = require('@babel/core');

const root = process.argv[2];
if (!root) {
  console.error('usage: node compile-docs.js ROOT');
  process.exit(2);
}
const app = process.cwd();
const docs = ['README.md', 'docs/js-api.md'];

/** The fenced blocks of a markdown file: { doc, line, lang, code }. */
function blocks(doc) {
  const lines = fs.readFileSync(path.join(root, doc), 'utf8').split('\n');
  const out = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\w*)\s*$/.exec(lines[i]);
    if (!open) continue;
    const start = i;
    const body = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]); i++) body.push(lines[i]);
    out.push({ doc, line: start + 1, lang: open[1], code: body.join('\n') });
  }
  return out;
}

/** A block as a module: its imports, then the rest inside an async function. */
function asModule(code) {
  const lines = code.split('\n');
  const imports = [];
  const body = [];
  let inImport = false;
  for (const line of lines) {
    if (inImport || /^import\s/.test(line)) {
      imports.push(line);
      inImport = !/(from\s+['"][^'"]+['"]|^import\s+['"][^'"]+['"]);?\s*$/.test(line);
    } else {
      body.push(line);
    }
  }
  return `${imports.join('\n')}\nexport async function snippet() {\n${body.join('\n')}\n}\n`;
}

let passed = 0;
let failed = 0;
const ok = (what) => {
  passed++;
  console.log(`ok   docs: ${what}`);
};
const fail = (what, why) => {
  failed++;
  console.log(`FAIL docs: ${what}: ${why}`);
};

const all = docs.flatMap(blocks);
const babelBlock = all.find((b) => b.lang === 'js' && b.code.startsWith('// babel.config.js'));
const tsconfigBlock = all.find((b) => b.lang === 'json' && b.code.includes('"@react-native/typescript-config"'));
if (!babelBlock || !tsconfigBlock) {
  fail('config blocks', `docs/js-api.md must show a babel.config.js block and a tsconfig block (found: babel ${!!babelBlock}, tsconfig ${!!tsconfigBlock})`);
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(1);
}
fs.writeFileSync(path.join(app, 'babel.config.js'), babelBlock.code + '\n');
fs.writeFileSync(path.join(app, 'tsconfig.json'), tsconfigBlock.code + '\n');
ok(`babel.config.js (${babelBlock.doc}:${babelBlock.line}) and tsconfig.json (${tsconfigBlock.doc}:${tsconfigBlock.line}) written`);

const compile = (code, filename, options = {}) =>
  babel.transformSync(code, { filename: path.join(app, filename), cwd: app, root: app, babelrc: false, configFile: path.join(app, 'babel.config.js'), ...options });

for (const b of all) {
  if (!['ts', 'tsx', 'js', 'jsx'].includes(b.lang) || b === babelBlock) continue;
  const where = `${b.doc}:${b.line} (${b.lang})`;
  try {
    const out = compile(asModule(b.code), `snippet.${b.lang === 'js' || b.lang === 'jsx' ? 'js' : 'tsx'}`);
    if (!out || typeof out.code !== 'string') throw new Error('no output');
    ok(`${where} compiles${/\bawait using\b/.test(b.code) ? ' (await using)' : ''}`);
  } catch (e) {
    fail(where, String(e.message).split('\n').slice(0, 3).join(' | '));
  }
}

// The control: React Native's preset alone refuses `await using`, as the docs say.
const using = 'import { loadModel } from "react-native-tessera";\nexport async function f() {\n  await using model = await loadModel("/m.gguf");\n}\n';
try {
  babel.transformSync(using, {
    filename: path.join(app, 'using.ts'),
    cwd: app,
    babelrc: false,
    configFile: false,
    presets: ['module:@react-native/babel-preset'],
  });
  fail('control', "React Native's preset alone compiled `await using`: the docs' claim is out of date");
} catch (e) {
  if (/plugin-transform-explicit-resource-management/.test(e.message)) ok("React Native's preset alone refuses `await using` (the plugin is needed)");
  else fail('control', `refused with another message: ${e.message.split('\n')[0]}`);
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

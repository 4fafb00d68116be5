#!/usr/bin/env node
// Thin launcher: `npm run build` (run by the `prepare` script on `npm ci`)
// compiles the CLI to dist/ and bundles it into dist/bundle/, so `npx subsync`
// works right after install.
import { existsSync } from 'node:fs';
const entry = new URL('../dist/bundle/cli.js', import.meta.url);
if (!existsSync(entry)) {
  console.error('subsync is not built yet: run `npm run build` (or `npm ci`, which builds it).');
  process.exit(1);
}
await import(entry.href);

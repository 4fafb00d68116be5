#!/usr/bin/env node
// Thin launcher: the CLI is compiled to dist/ by `npm run build` (run by the
// `prepare` script on `npm ci`), so `npx subsync` works right after install.
import { existsSync } from 'node:fs';
const entry = new URL('../dist/src/cli.js', import.meta.url);
if (!existsSync(entry)) {
  console.error('subsync is not built yet: run `npm run build` (or `npm ci`, which builds it).');
  process.exit(1);
}
await import(entry.href);

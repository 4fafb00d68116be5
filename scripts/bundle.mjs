// The last step of `npm run build`: the compiled CLI (dist/src/cli.js) and the
// packages it imports joined into a few files in dist/bundle/, which
// bin/subsync.js runs. Node loads about 750 files for a worker from
// node_modules and dist/src, and resolving and linking them cost more than
// the code in them: a bundled worker is ready in half the time and CPU, which
// a fleet started with an import spends beside its first requests.
//
// Kept out of the bundle, loaded from node_modules as before:
// - the dashboard's packages (fastify, @fastify/*, @bull-board/*): only the
//   dashboard and `start` load them, and bull-board finds its page's files
//   relative to its own package;
// - msgpackr-extract, a native addon found at run time.
// A `require` made from the bundle's own URL serves the CommonJS packages'
// requires of Node's modules and of the packages left out.
//
// Stack traces name the bundle's files; `node --enable-source-maps
// bin/subsync.js ...` maps them back to src/ through the .map files.
import { rmSync } from 'node:fs';
import { build } from 'esbuild';

const outdir = 'dist/bundle';
rmSync(outdir, { recursive: true, force: true });
await build({
  entryPoints: ['dist/src/cli.js'],
  outdir,
  bundle: true,
  // The commands that import their code on use (the dashboard, the sandbox,
  // the demo) get chunks of their own, loaded as before only when run.
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  sourcemap: 'linked',
  // Whitespace and comments out, and syntax shortened, so V8 parses less at
  // every start (names are kept: stack traces and profiles read as before).
  // Licence comments go to a .LEGAL.txt beside each file, which keeps the
  // code files ASCII: one other character makes V8 hold a whole file's
  // source at two bytes a character.
  minifyWhitespace: true,
  minifySyntax: true,
  legalComments: 'external',
  external: ['fastify', '@fastify/*', '@bull-board/*', 'msgpackr-extract'],
  banner: { js: "import { createRequire as createRequireOfBundle } from 'node:module';\nconst require = createRequireOfBundle(import.meta.url);" },
  logLevel: 'warning',
});

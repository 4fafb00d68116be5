// The dependency check of `npm test`: no import cycle between files, and no
// import from a layer above. Layers, lowest first; a module may import its own
// layer and the ones below. A top-level file (src/config.ts) is its own module.
// It checks `src/` and `jobs/` under the current directory.
import { existsSync } from 'node:fs';
import madge from 'madge';

const LAYERS = [
  ['outcomes', 'policy', 'secrets', 'paths', 'backoff', 'errors', 'files', 'memo', 'slices'],
  ['api', 'config', 'cards', 'log'],
  ['results', 'sandbox', 'metrics'],
  ['csv'],
  ['redis'],
  ['store', 'failureLog', 'audit'],
  ['queue', 'notify'],
  ['customers'],
  ['export'],
  ['jobs'],
  ['import'],
  ['rows'],
  ['workers'],
  ['runtime'],
  ['dashboard', 'watch'],
  ['cli'],
];
const rank = new Map(LAYERS.flatMap((names, i) => names.map((name) => [name, i])));

/** `src/queue/queues.ts` -> `queue`; `src/config.ts` -> `config`; `jobs/x.ts` -> `jobs`. */
function moduleOf(file) {
  const parts = file.split('/');
  if (parts[0] === 'jobs') return 'jobs';
  if (parts[0] === 'src' && parts.length === 2) return parts[1] === 'cli.ts' ? 'cli' : parts[1].replace(/\.ts$/, '');
  return parts[1];
}

const roots = ['src', 'jobs'].filter((root) => existsSync(root));
const result = await madge(roots, { baseDir: process.cwd(), fileExtensions: ['ts'], ...(existsSync('tsconfig.json') ? { tsConfig: 'tsconfig.json' } : {}), detectiveOptions: { ts: { skipTypeImports: false } } });
const problems = [];
for (const cycle of result.circular()) problems.push(`import cycle: ${cycle.join(' -> ')} -> ${cycle[0]}`);
for (const [file, imports] of Object.entries(result.obj())) {
  const from = moduleOf(file);
  if (!rank.has(from)) problems.push(`${file}: module "${from}" has no layer (scripts/layers.mjs)`);
  for (const target of imports) {
    const to = moduleOf(target);
    if (rank.has(from) && rank.has(to) && rank.get(to) > rank.get(from)) problems.push(`${file} imports ${target}: "${from}" may not import from "${to}", a layer above it`);
  }
}
if (result.warnings().skipped.length > 0) problems.push(`unresolved imports: ${result.warnings().skipped.join(', ')}`);
if (problems.length > 0) {
  console.error(`dependency check: ${problems.length} problem(s)\n${problems.join('\n')}`);
  process.exit(1);
}
console.log(`dependency check: ${Object.keys(result.obj()).length} files, no cycle, every import downward`);

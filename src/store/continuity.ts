import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { RedisClient } from '../redis/redis.js';
import { z } from 'zod';
import { writeFileAtomic } from '../files.js';

const MarkerSchema = z.object({ id: z.string(), since: z.number() });
type Marker = z.infer<typeof MarkerSchema>;

/**
 * Detects a Redis that lost subsync's data (restarted without persistence, or
 * flushed): Redis holds a marker, and the data dir remembers the marker it
 * last saw. A remembered marker missing from Redis means everything queued
 * before is gone. Returns the explanation for the operator, or undefined.
 */
export async function checkContinuity(redis: RedisClient, prefix: string, dataDir: string, now = Date.now()): Promise<string | undefined> {
  const key = `${prefix}:instance`;
  const local = path.join(dataDir, 'state', `redis-instance.${prefix.replace(/[^A-Za-z0-9_.-]/g, '_')}.json`);
  const seen = await readMarker(local);
  const fresh: Marker = { id: randomUUID(), since: now };
  const created = await redis.set(key, JSON.stringify(fresh), 'NX');
  const current = created ? fresh : MarkerSchema.parse(JSON.parse((await redis.get(key)) ?? JSON.stringify(fresh)));
  if (seen?.id !== current.id) await writeMarker(local, current);
  if (created && seen) {
    return (
      `Redis lost subsync's data: the state kept since ${new Date(seen.since).toISOString()} is gone (Redis restarted without persistence, or was flushed). ` +
      'Imports that were queued or running are lost; import the same files again: their creates read back before sending, so nothing is created twice.'
    );
  }
  return undefined;
}

async function readMarker(file: string): Promise<Marker | undefined> {
  try {
    return MarkerSchema.parse(JSON.parse(await readFile(file, 'utf8')));
  } catch {
    return undefined;
  }
}

async function writeMarker(file: string, marker: Marker): Promise<void> {
  await writeFileAtomic(file, JSON.stringify(marker));
}

/** Where an import's rows came from: enough to read its card cells again, and to know the file is still the one imported. */
const JournalSourceSchema = z.object({
  /** The file's absolute path when it was imported. */
  path: z.string(),
  /** The digest of its kind and bytes (src/import/producer.ts scanFile), which the import id begins with. */
  digest: z.string(),
  /** How it was read: `--encoding`, and `--map`'s columns (they decide the header line). */
  encoding: z.string().optional(),
  map: z.record(z.string(), z.string().nullable()).optional(),
});
export type JournalSource = z.infer<typeof JournalSourceSchema>;

const JournalEntrySchema = z.object({ file: z.string(), kind: z.string(), createdAt: z.number(), source: JournalSourceSchema.optional() });
export type JournalEntry = z.infer<typeof JournalEntrySchema>;

/**
 * The import journal: one small file per import the producer started, kept
 * in the data dir. An import id that the journal knows but Redis does not was
 * lost with Redis: its rows may have been sent, so they read back first. It
 * also says where the import's file was, so a card row whose sealed cells
 * Redis lost can have them read again from that file (src/import/cardCells.ts).
 */
export function importJournal(dataDir: string) {
  const dir = path.join(dataDir, 'journal');
  const fileOf = (importId: string): string => path.join(dir, `${importId}.json`);
  return {
    async record(importId: string, entry: JournalEntry): Promise<void> {
      await writeFileAtomic(fileOf(importId), JSON.stringify(entry));
    },
    async has(importId: string): Promise<boolean> {
      try {
        await readFile(fileOf(importId));
        return true;
      } catch {
        return false;
      }
    },
    /** The import's entry, or undefined (never recorded here, or unreadable). */
    async read(importId: string): Promise<JournalEntry | undefined> {
      try {
        return JournalEntrySchema.parse(JSON.parse(await readFile(fileOf(importId), 'utf8')));
      } catch {
        return undefined;
      }
    },
  };
}
export type ImportJournal = ReturnType<typeof importJournal>;

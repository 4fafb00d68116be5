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

/**
 * The import journal: one small file per import the producer started, kept
 * in the data dir. An import id that the journal knows but Redis does not was
 * lost with Redis: its rows may have been sent, so they read back first.
 */
export function importJournal(dataDir: string) {
  const dir = path.join(dataDir, 'journal');
  const fileOf = (importId: string): string => path.join(dir, `${importId}.json`);
  return {
    async record(importId: string, entry: { file: string; kind: string; createdAt: number }): Promise<void> {
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
  };
}
export type ImportJournal = ReturnType<typeof importJournal>;

/**
 * An import's search index, for `subsync find` and the dashboard's search
 * box: one Redis hash per import (`<prefix>:import:<id>:find`), the digest of
 * a search term (8 bytes, binary) -> the rows holding it, comma-separated.
 *
 * Terms are an email, a first name, a last name, the full name, a
 * CustomerID and a PaymentMethodKey, as the producer reads them from the file
 * and as the service answers them when a row settles (a created customer's
 * id, a sign-up's payment method). Card numbers, CVCs and passwords are never
 * terms: no column holding them is read here.
 *
 * A term's rows stop growing at {@link MAX_TERM_ROWS_TEXT} characters (about
 * 1,000 rows); a `+` at the end says some were left out. A term on more rows
 * than that (a first name shared by half the file) finds too much to read
 * anyway. A row may be listed twice (its id known from the file and again
 * from the service, or a retried row): the reader drops repeats.
 */
import { hash } from 'node:crypto';

/** Characters of one term's row list, beyond which rows are no longer added. */
export const MAX_TERM_ROWS_TEXT = 8_000;

/** Bytes of a term's digest: 64 bits, as the customer index's keys (a hit is checked against its row anyway). */
export const TERM_DIGEST_BYTES = 8;

/**
 * The digest of a normalised term: the first 8 bytes of its SHA-1 (one-shot:
 * the producer takes several per row), as a latin1 string (one character a
 * byte, so it keys a Map); {@link digestBytes} turns it into what Redis stores.
 */
export function termDigest(normalized: string): string {
  // The digest read as latin1 ('binary') is its bytes a character each: its first 8 characters are the first 8 bytes
  // (a Buffer answer costs four times the hash of a short term).
  return hash('sha1', `find\u0000${normalized}`, 'binary').slice(0, TERM_DIGEST_BYTES);
}

/** A digest of {@link termDigest} as the bytes Redis holds: binary fields take a fifth less memory than hex. */
export const digestBytes = (digest: string): Buffer => Buffer.from(digest, 'latin1');

/** An identifier (CustomerID, PaymentMethodKey) as searched: trimmed, without braces, lower-case. */
export function idTerm(value: string): string {
  return value.trim().replace(/^\{(.*)\}$/, '$1').trim().toLowerCase();
}

/**
 * Lua: `addTerms(index, adds)` appends rows to terms' lists, unless full;
 * `adds` is a flat list (term digest, rows comma-separated, term, rows,
 * ...), in order. One HMGET and one HSET per call (hmgetMany, hsetMany of
 * src/redis/script.ts, defined before it), not a command or three per term:
 * each addition is made in the script's memory, in order, as if written one
 * by one.
 */
export const ADD_TERMS_LUA = `
local function addTerms(index, adds)
  local terms = {}
  for i = 1, #adds, 2 do terms[#terms + 1] = adds[i] end
  local stored = hmgetMany(index, terms)
  local now, dirty, order = {}, {}, {}
  for i = 1, #terms do
    local term, rows = terms[i], adds[2 * i]
    local current = now[term]
    if current == nil then current = stored[i] end
    local after = nil
    if not current then after = rows
    elseif current == rows then after = nil
    elseif #current < ${MAX_TERM_ROWS_TEXT} then after = current .. ',' .. rows
    elseif string.sub(current, -1) ~= '+' then after = current .. ',+' end
    if after then
      now[term] = after
      if not dirty[term] then
        dirty[term] = true
        order[#order + 1] = term
      end
    else
      now[term] = current
    end
  end
  local flat = {}
  for _, term in ipairs(order) do
    flat[#flat + 1] = term
    flat[#flat + 1] = now[term]
  end
  hsetMany(index, flat)
end`;

/** A term's stored rows: ascending, without repeats; `truncated` when rows were left out. */
export function parseTermRows(text: string | null | undefined): { rows: number[]; truncated: boolean } {
  if (!text) return { rows: [], truncated: false };
  const rows = new Set<number>();
  let truncated = false;
  for (const part of text.split(',')) {
    if (part === '+') truncated = true;
    else if (/^\d+$/.test(part)) rows.add(Number(part));
  }
  return { rows: [...rows].sort((a, b) => a - b), truncated };
}

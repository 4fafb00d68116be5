import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { REDACTED, REDACT_PATHS, createLogger } from '../src/log.js';

const PAN = '4111111111111111';

/** A destination that keeps every line written to it. */
function capture(): { stream: Writable; text: () => string; lines: () => unknown[] } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer | string, _encoding, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  const text = (): string => chunks.join('');
  const lines = (): unknown[] =>
    text()
      .split('\n')
      .filter((line) => line !== '')
      .map((line): unknown => JSON.parse(line));
  return { stream, text, lines };
}

describe('createLogger', () => {
  it('redacts card fields at the top level and nested, arrays and child bindings included', () => {
    const out = capture();
    const log = createLogger({ destination: out.stream });
    log.info({ AccountNumber: PAN, CVCode: '123' }, 'top level');
    log.info({ job: { data: { CreditCardInfo: { AccountNumber: PAN, CVCode: '123' } } } }, 'nested');
    log.info({ rows: [{ CreditCard: { AccountNumber: PAN, CVCode: '123' } }] }, 'in an array');
    log.info({ a: { b: { c: { d: { cardNumber: PAN, cvc: '123' } } } } }, 'depth four, aliases');
    log.child({ card: { AccountNumber: PAN } }).info('child binding');

    const text = out.text();
    expect(out.lines()).toHaveLength(5);
    expect(text).not.toContain(PAN);
    expect(text).not.toContain('"123"');
    expect(text).toContain(`"AccountNumber":"${REDACTED}"`);
    expect(text).toContain(`"CVCode":"${REDACTED}"`);
    expect(text).toContain(`"cardNumber":"${REDACTED}"`);
  });

  it('keeps the other card fields, which are not secret', () => {
    const out = capture();
    createLogger({ destination: out.stream }).info({ CreditCardInfo: { AccountNumber: PAN, ExpirationDate: '1230' } });
    expect(out.text()).toContain('"ExpirationDate":"1230"');
  });

  it('redacts the Authorization header of logged requests', () => {
    const out = capture();
    const log = createLogger({ destination: out.stream });
    log.info({ req: { method: 'GET', headers: { authorization: 'Bearer s3cret' } } });
    log.info({ headers: { authorization: 'Bearer s3cret' } });
    log.info({ request: { headers: { Authorization: 'Bearer s3cret' } } });
    expect(out.text()).not.toContain('s3cret');
    expect(out.text()).toContain('"GET"');
  });

  it('serialises errors as data, and redacts card fields they carry', () => {
    const out = capture();
    const err = Object.assign(new Error('refused'), { code: 'API_REFUSED', body: { CreditCardInfo: { AccountNumber: PAN } } });
    createLogger({ destination: out.stream }).error({ err }, 'failed');
    const [line] = out.lines();
    expect(line).toMatchObject({ err: { type: 'Error', message: 'refused', code: 'API_REFUSED' } });
    expect(out.text()).toContain('"stack":');
    expect(out.text()).not.toContain(PAN);
  });

  it('honours the level', () => {
    const out = capture();
    const log = createLogger({ level: 'warn', destination: out.stream });
    log.info('hidden');
    log.warn('shown');
    expect(out.text()).not.toContain('hidden');
    expect(out.text()).toContain('shown');
  });

  it('lists the card paths it redacts', () => {
    expect(REDACT_PATHS).toContain('AccountNumber');
    expect(REDACT_PATHS).toContain('*.*.*.*.CVCode');
    expect(REDACT_PATHS).toContain('req.headers.authorization');
    expect(REDACT_PATHS).toContain('*.Password');
  });
});

describe('errors logged', () => {
  it('have card-shaped digit runs scrubbed from their message, stack, causes and fields, in any form', () => {
    const out = capture();
    const log = createLogger({ destination: out.stream });
    const cause = new Error('processor said 2223.0063.3519.5263');
    const error = Object.assign(new Error(`declined: card ${PAN} (4111.1111.1111.1111)`, { cause }), { apiMessage: `card 4111/1111/1111/1111`, details: { echoed: `4111\t1111\t1111\t1111` } });
    log.info({ err: error }, 'row attempt failed');
    log.error({ error }, 'as error');

    const text = out.text();
    expect(out.lines()).toHaveLength(2);
    for (const card of [PAN, '2223006335195263']) {
      // Whatever separates the digits.
      expect(text.replace(/\\[tn]|[\s./-]/g, '')).not.toContain(card);
    }
    expect(text).toContain('declined: card ************1111 (************1111)');
    expect(text).toContain('processor said ************5263');
    // Not an error, logged as one: scrubbed all the same.
    log.warn({ err: 'card 4111 1111 1111 1111 refused' }, 'a string');
    log.warn({ err: { reason: 'card 4111-1111-1111-1111' } }, 'an object');
    expect(out.text()).not.toMatch(/4111\D?1111\D?1111\D?1111/);
    // The error itself is left as it was: only what is written is scrubbed.
    expect(error.apiMessage).toBe('card 4111/1111/1111/1111');
  });
});

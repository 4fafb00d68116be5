import { describe, expect, it } from 'vitest';
import { UnrecoverableError } from 'bullmq';
import { ApiError, ApiRefusedError, ApiServerError, withoutSecrets } from '../src/api/errors.js';
import { CVC_MASK, PASSWORD_MASK, scrubSecrets } from '../src/secrets.js';

describe('scrubSecrets', () => {
  it("masks a row's own card number in any form, and its CVC where it stands alone", () => {
    const text = 'card 4111111111111111 (4111.1111.1111.1111) cvc 737 was declined; 4111 1111-1111/1111, 4111\t1111_1111 1111';
    expect(scrubSecrets(text, ['4111111111111111', '737'])).toBe(
      `card ************1111 (************1111) cvc ${CVC_MASK} was declined; ************1111, ************1111`,
    );
    // Not inside a longer number; with separators of its own, it is the CVC still.
    expect(scrubSecrets('order 17370, ref 737-1, code 7 3 7', ['737'])).toBe(`order 17370, ref ${CVC_MASK}-1, code ${CVC_MASK}`);
    // A CVC equal to the card number's last four leaves the masked number alone.
    expect(scrubSecrets('card 378282246310005 cvc 0005', ['378282246310005', '0005'])).toBe(`card ***********0005 cvc ${CVC_MASK}`);
  });

  it('masks every card-shaped digit run it is not told of, whatever separates the digits', () => {
    expect(scrubSecrets('2223.0063.3519.5263 and 5555-5555/5555 4444 and 3782 822463 10005')).toBe('************5263 and ************4444 and ***********0005');
    expect(scrubSecrets('12345678901234567890123')).toBe('*******************0123');
    // Phone numbers, dates, addresses and counts are not card-shaped.
    const plain = 'row 12 (spreadsheet row 14, line 14), 2026-11-24T03:10:51.000Z, +33 1 42 60 00 00, 127.0.0.1:8787, 3 of 120';
    expect(scrubSecrets(plain)).toBe(plain);
  });

  it('writes a password as the mask wherever it appears; a short one only where it stands alone', () => {
    expect(scrubSecrets('Password "hunter2!x" is too weak: hunter2!x', ['hunter2!x'])).toBe(`Password "${PASSWORD_MASK}" is too weak: ${PASSWORD_MASK}`);
    expect(scrubSecrets('the password ab1 of customer Cab1e is refused', ['ab1'])).toBe(`the password ${PASSWORD_MASK} of customer Cab1e is refused`);
    // Regular-expression characters in a password are taken as written.
    expect(scrubSecrets('rejected: a.*b(c', ['a.*b(c'])).toBe(`rejected: ${PASSWORD_MASK}`);
  });

  it('is idempotent, and ignores empty secrets', () => {
    const once = scrubSecrets('card 4111111111111111 cvc 737', ['4111111111111111', '737', '', '  ']);
    expect(scrubSecrets(once, ['4111111111111111', '737'])).toBe(once);
  });
});

describe('withoutSecrets', () => {
  const echoed = 'Card 4111111111111111 (4111.1111.1111.1111) cvc 737 was declined';

  it('gives an ApiError of the same class whose message, words and stack are scrubbed', () => {
    const error = ApiError.fromResponse({ endpoint: 'signUp', method: 'POST', status: 400, apiMessage: echoed, retryAfter: undefined });
    // Made without the row's secrets, the card-shaped runs are gone already, the CVC not yet.
    expect(error.message).not.toMatch(/4111\D?1111\D?1111\D?1111/);
    expect(error.stack).not.toMatch(/4111\D?1111\D?1111\D?1111/);
    const scrubbed = withoutSecrets(error, ['4111111111111111', '737']);
    expect(scrubbed).toBeInstanceOf(ApiRefusedError);
    const api = scrubbed as ApiRefusedError;
    expect(api.apiMessage).toBe(`Card ************1111 (************1111) cvc ${CVC_MASK} was declined`);
    for (const text of [api.message, api.stack ?? '', JSON.stringify(api.toJSON())]) {
      expect(text).not.toMatch(/\b737\b/);
      expect(text).not.toMatch(/4111\D?1111\D?1111\D?1111/);
    }
    expect(api.transient).toBe(false);
    expect(api.status).toBe(400);
  });

  it("scrubs the request's own secrets as the client makes the error, so its first stack is clean", () => {
    const error = ApiError.fromResponse({ endpoint: 'signUp', method: 'POST', status: 500, apiMessage: echoed, retryAfter: undefined, secrets: ['4111111111111111', '737'] });
    expect(error).toBeInstanceOf(ApiServerError);
    expect(error.stack ?? '').toContain(`cvc ${CVC_MASK}`);
    expect(error.stack ?? '').not.toMatch(/\b737\b/);
  });

  it('scrubs another error in place, keeping its class, its cause too', () => {
    const error = new UnrecoverableError(`refused: ${echoed}`);
    const cause = new Error('cvc 737 again');
    const withCause = new TypeError(`bad ${echoed}`, { cause });
    expect(withoutSecrets(error, ['737'])).toBe(error);
    expect(error).toBeInstanceOf(UnrecoverableError);
    expect(error.message).toBe(`refused: Card ************1111 (************1111) cvc ${CVC_MASK} was declined`);
    expect(error.stack).not.toMatch(/\b737\b/);
    withoutSecrets(withCause, ['737']);
    expect(cause.message).toBe(`cvc ${CVC_MASK} again`);
    expect(withoutSecrets('cvc 737', ['737']).message).toBe(`cvc ${CVC_MASK}`);
  });
});

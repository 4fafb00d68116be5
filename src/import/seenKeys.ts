import type { Buffer } from 'node:buffer';

/**
 * The first row of a file that carried each key (a 64-bit digest, see
 * src/customers/identity.ts), in typed arrays: 16 bytes a slot, so a file of a
 * million rows keeps its keys in about 32 MB, where a Map of strings would
 * take several times that. Open addressing, linear probing, grown at half
 * full.
 */
export class SeenKeys {
  private hi = new Uint32Array(1024);
  private lo = new Uint32Array(1024);
  /** Row numbers (≥ 1); 0 marks an empty slot. */
  private rows = new Int32Array(1024);
  private count = 0;

  /**
   * Records `row` as the first to carry `digest` unless a row did before;
   * returns that earlier row, or 0 when this one is the first.
   */
  firstRow(digest: Buffer, row: number): number {
    const hi = digest.readUInt32BE(0);
    const lo = digest.readUInt32BE(4);
    if ((this.count + 1) * 2 > this.rows.length) this.grow();
    const slot = this.find(hi, lo);
    const earlier = this.rows[slot] ?? 0;
    if (earlier !== 0) return earlier;
    this.hi[slot] = hi;
    this.lo[slot] = lo;
    this.rows[slot] = row;
    this.count++;
    return 0;
  }

  get size(): number {
    return this.count;
  }

  /** The slot holding (hi, lo), or the empty slot where it belongs. */
  private find(hi: number, lo: number): number {
    const mask = this.rows.length - 1;
    for (let slot = (lo ^ Math.imul(hi, 0x9e3779b1)) & mask; ; slot = (slot + 1) & mask) {
      if (this.rows[slot] === 0 || (this.hi[slot] === hi && this.lo[slot] === lo)) return slot;
    }
  }

  private grow(): void {
    const { hi, lo, rows } = this;
    this.hi = new Uint32Array(rows.length * 2);
    this.lo = new Uint32Array(rows.length * 2);
    this.rows = new Int32Array(rows.length * 2);
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i] ?? 0;
      if (row === 0) continue;
      const slot = this.find(hi[i] ?? 0, lo[i] ?? 0);
      this.hi[slot] = hi[i] ?? 0;
      this.lo[slot] = lo[i] ?? 0;
      this.rows[slot] = row;
    }
  }
}

import { describe, expect, it } from 'vitest';
import { escapeFormula } from '../../src/results/formula.js';

describe('escapeFormula', () => {
  it.each([
    ['=SUM(A1:A9)', "'=SUM(A1:A9)"],
    ['+33612345678', "'+33612345678"],
    ['-1', "'-1"],
    ['@cmd', "'@cmd"],
    ['\tindented', "'\tindented"],
    ['\r=1', "'\r=1"],
    ['\n=1', "'\n=1"],
    ['\0=1', "'\0=1"],
    ['=', "'="],
  ])('prefixes %j', (cell, escaped) => {
    expect(escapeFormula(cell)).toBe(escaped);
  });

  it.each([
    [''],
    ['Dupont'],
    ['a=b'],
    ['1+1'],
    ['jean@example.fr'],
    [' =1'],
    ["'=already"],
    ['Élodie'],
    ['0612345678'],
  ])('leaves %j alone', (cell) => {
    expect(escapeFormula(cell)).toBe(cell);
  });
});

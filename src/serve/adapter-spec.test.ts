import { describe, expect, it } from 'vitest';
import { parseAdapterSpec } from './adapter-spec.js';

describe('parseAdapterSpec', () => {
  it('reads NAME=DIR and plain DIR (named after the folder)', () => {
    expect(parseAdapterSpec('agent=runs/x/checkpoints/best')).toEqual({ name: 'agent', dir: 'runs/x/checkpoints/best' });
    expect(parseAdapterSpec('runs/x/checkpoints/step-0004')).toEqual({ name: 'step-0004', dir: 'runs/x/checkpoints/step-0004' });
    expect(parseAdapterSpec('/tmp/a=b/c')).toEqual({ name: 'c', dir: '/tmp/a=b/c' });
  });
});

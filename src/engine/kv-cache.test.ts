import { describe, expect, it } from 'vitest';
import { availableMemory, kvBudget, KV_DEFAULT_SHARE } from './kv-cache.js';

const MiB = 2 ** 20;
const base = { available: 8000 * MiB, weights: 1000 * MiB, oneSequence: 900 * MiB, context: 4096, dir: '/m' };

describe('the KV cache budget at load', () => {
  it('defaults to a share of what the weights leave, and never to less than one sequence at the full context', () => {
    expect(kvBudget({ ...base, kvCacheMib: undefined })).toEqual({ bytes: Math.floor(7000 * MiB * KV_DEFAULT_SHARE) });
    expect(kvBudget({ ...base, oneSequence: 5000 * MiB, kvCacheMib: undefined })).toEqual({ bytes: 5000 * MiB });
  });

  it('takes the budget asked for, in MiB', () => {
    expect(kvBudget({ ...base, kvCacheMib: 2048 })).toEqual({ bytes: 2048 * MiB });
  });

  it('refuses a budget below one sequence, and weights plus one sequence beyond the memory available, naming the bytes', () => {
    const low = kvBudget({ ...base, kvCacheMib: 512 });
    expect('refused' in low && low.refused).toContain(`a KV cache budget of ${512 * MiB} bytes (--kv-cache-mib 512) cannot hold one sequence of the model's 4096-token context, which needs ${900 * MiB} bytes`);
    const big = kvBudget({ ...base, oneSequence: 7500 * MiB, kvCacheMib: 65536 });
    expect('refused' in big && big.refused).toContain(`the model needs ${8500 * MiB} bytes`);
    expect('refused' in big && big.refused).toContain(`but ${8000 * MiB} bytes`);
  });

  it('reads a positive amount of memory available', () => {
    expect(availableMemory()).toBeGreaterThan(0);
  });
});

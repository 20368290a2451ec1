/**
 * CLI: write a seeded random HF model folder (and optionally a random LoRA adapter).
 *   node --import tsx scripts/make-random-model.ts --arch qwen3 --out /tmp/m [--dtype BF16] [--untied] [--shards 2]
 *     [--hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 --intermediate 128] [--preset bench50m]
 *     [--adapter DIR --rank 4 --alpha 8 --rslora --targets q_proj,v_proj]
 */
import { parseArgs } from 'node:util';
import { BENCH_50M, makeRandomAdapter, makeRandomModel, type Arch, type FloatDType, type RandomModelOptions } from './random-model.js';

const { values } = parseArgs({
  options: {
    arch: { type: 'string', default: 'qwen3' },
    out: { type: 'string' },
    seed: { type: 'string', default: '1' },
    dtype: { type: 'string', default: 'F32' },
    untied: { type: 'boolean', default: false },
    shards: { type: 'string', default: '1' },
    hidden: { type: 'string' },
    layers: { type: 'string' },
    heads: { type: 'string' },
    'kv-heads': { type: 'string' },
    'head-dim': { type: 'string' },
    intermediate: { type: 'string' },
    preset: { type: 'string' },
    adapter: { type: 'string' },
    rank: { type: 'string', default: '4' },
    alpha: { type: 'string', default: '8' },
    rslora: { type: 'boolean', default: false },
    targets: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});

if (values.help || !values.out) {
  console.log('usage: make-random-model.ts --out DIR [--arch qwen3|qwen2|llama] [--seed N] [--dtype F32|BF16|F16] [--untied] [--shards N]\n' +
    '  [--hidden H --layers L --heads NH --kv-heads NKV --head-dim D --intermediate I] [--preset bench50m]\n' +
    '  [--adapter DIR --rank R --alpha A --rslora --targets q_proj,v_proj,...]');
  process.exit(values.help ? 0 : 1);
}
const num = (v: string | undefined) => (v === undefined ? undefined : Number(v));
const opts: RandomModelOptions = {
  ...(values.preset === 'bench50m' ? BENCH_50M : {}),
  arch: values.arch as Arch,
  seed: Number(values.seed),
  dtype: values.dtype!.toUpperCase() as FloatDType,
  tieWordEmbeddings: !values.untied,
  shards: Number(values.shards),
};
for (const [key, flag] of [['hiddenSize', 'hidden'], ['numLayers', 'layers'], ['numHeads', 'heads'], ['numKvHeads', 'kv-heads'], ['headDim', 'head-dim'], ['intermediateSize', 'intermediate']] as const) {
  const v = num(values[flag]);
  if (v !== undefined) opts[key] = v;
}
await makeRandomModel(values.out, opts);
if (values.adapter) {
  await makeRandomAdapter(values.adapter, opts, {
    seed: Number(values.seed) + 1,
    rank: Number(values.rank),
    alpha: Number(values.alpha),
    useRslora: values.rslora,
    targetModules: values.targets?.split(','),
  }, values.out);
}
console.error(`wrote ${values.arch} model to ${values.out}${values.adapter ? ` and adapter to ${values.adapter}` : ''}`);

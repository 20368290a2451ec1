/**
 * A real Qwen3-shaped HF model folder whose weights make it say a chosen token sequence, so that tests of
 * tool calls, stop strings and the like can run the real engine and still know what it will write.
 *
 * How: start from a random model with untied embeddings, zero every attention output and MLP down
 * projection (the residual stream then carries only the current token's embedding), and add to the LM-head
 * row of each next token a large multiple of the current token's final hidden state. The model becomes a
 * bigram chain: token chain[i] is followed by chain[i+1] with a logit margin far above the noise, at any
 * temperature that tests use. Each token may appear only once in the chain.
 */
import { join } from 'node:path';
import { makeRandomModel, resolveShape, type RandomModelOptions } from '../../scripts/random-model.js';
import { f32Tensor, readSafetensors, toFloat32, writeSafetensors } from '../../src/hf/safetensors.js';

export interface ScriptedModelOptions {
  /** Default 7. */
  seed?: number;
  /** Logit margin added for each step of the chain. Default 60. */
  margin?: number;
}

/**
 * Writes the model to `dir`. `chain[0]` is the trigger: when a prompt ends with it, greedy or sampled
 * generation produces chain[1], chain[2], …
 */
export async function makeScriptedModel(dir: string, chain: number[], opts: ScriptedModelOptions = {}): Promise<void> {
  if (new Set(chain).size !== chain.length) throw new Error('a scripted chain may not repeat a token');
  const shape: RandomModelOptions = { arch: 'qwen3', seed: opts.seed ?? 7, tieWordEmbeddings: false };
  await makeRandomModel(dir, shape);
  const s = resolveShape(shape);
  const file = join(dir, 'model.safetensors');
  const { tensors } = await readSafetensors(file);
  const H = s.hiddenSize;
  const out = new Map<string, ReturnType<typeof f32Tensor>>();
  for (const [name, t] of tensors) {
    if (name.endsWith('self_attn.o_proj.weight') || name.endsWith('mlp.down_proj.weight')) {
      out.set(name, f32Tensor(t.shape, new Float32Array(t.shape.reduce((a, b) => a * b, 1))));
    } else {
      out.set(name, f32Tensor(t.shape, toFloat32(t, name)));
    }
  }
  const embed = toFloat32(out.get('model.embed_tokens.weight')!);
  const gain = toFloat32(out.get('model.norm.weight')!);
  const head = toFloat32(out.get('lm_head.weight')!);
  const hidden = (token: number): Float32Array => {
    // The final RMSNorm of the token's embedding: what the LM head sees once the blocks add nothing.
    const x = embed.subarray(token * H, (token + 1) * H);
    let ms = 0;
    for (let j = 0; j < H; j++) ms += x[j] * x[j];
    const inv = 1 / Math.sqrt(ms / H + 1e-6);
    return Float32Array.from(x, (v, j) => v * inv * gain[j]);
  };
  const margin = opts.margin ?? 60;
  for (let i = 0; i + 1 < chain.length; i++) {
    const h = hidden(chain[i]);
    const norm2 = h.reduce((a, v) => a + v * v, 0);
    const row = head.subarray(chain[i + 1] * H, (chain[i + 1] + 1) * H);
    for (let j = 0; j < H; j++) row[j] += (margin * h[j]) / norm2;
  }
  // Check the chain really is the argmax at every step, with room to spare.
  const V = s.vocabSize;
  for (let i = 0; i + 1 < chain.length; i++) {
    const h = hidden(chain[i]);
    let best = -1;
    let bestLogit = -Infinity;
    let second = -Infinity;
    for (let v = 0; v < V; v++) {
      let z = 0;
      for (let j = 0; j < H; j++) z += head[v * H + j] * h[j];
      if (z > bestLogit) {
        second = bestLogit;
        bestLogit = z;
        best = v;
      } else if (z > second) second = z;
    }
    if (best !== chain[i + 1] || bestLogit - second < 20) {
      throw new Error(`scripted model: step ${i} would not follow the chain (argmax ${best}, margin ${bestLogit - second})`);
    }
  }
  out.set('lm_head.weight', f32Tensor([V, H], head));
  await writeSafetensors(file, out, { format: 'pt' });
}

/**
 * How the engine keeps a base model's big matrices (projections, embedding, untied LM head) in memory on CPU.
 * `auto` (the default): as the checkpoint stores them — BF16 and F16 stay 16-bit (half the memory; widened to
 * f32 inside the matrix products, so the arithmetic stays f32 and decoding stays batch-invariant), F32 stays f32.
 * `f32`: every matrix widened to f32 at load (the oracle). `bf16`: every matrix kept as bf16, F32 and F16
 * checkpoints rounded to nearest even. Norm weights, biases and LoRA adapters are always f32.
 */
import { z } from 'zod';

export const WeightDtypeSchema = z.enum(['auto', 'f32', 'bf16']).default('auto');
export type WeightDtype = z.infer<typeof WeightDtypeSchema>;

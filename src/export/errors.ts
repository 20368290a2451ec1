/**
 * Infrastructure failures of the export stage. Every message names the file (and tensor, where there is
 * one) so that a user can find what is wrong with a model or adapter folder without reading the code.
 */
import { McprlError } from '../util/errors.js';

export type ExportErrorCode =
  /** A file the folder must hold is absent (config.json, weights, adapter files, a shard named by the index). */
  | 'MISSING_FILE'
  /** A JSON file is not valid JSON or lacks a required field. */
  | 'BAD_CONFIG'
  /** The model_type, activation, rope scaling or another setting is one mcprl cannot export. */
  | 'UNSUPPORTED_MODEL'
  /** A tensor the architecture needs is in none of the weight files. */
  | 'MISSING_TENSOR'
  /** A tensor is in the weight files that the architecture does not use (it would be silently dropped). */
  | 'EXTRA_TENSOR'
  /** A tensor has a shape other than the config implies, or a dtype that is not a float type. */
  | 'BAD_TENSOR'
  /** The adapter is not a LoRA adapter mcprl can read, or does not fit the model. */
  | 'BAD_ADAPTER'
  /** The output folder cannot be written (it exists and is not empty, and overwrite was not asked for). */
  | 'OUTPUT_EXISTS';

export class ExportError extends McprlError<ExportErrorCode> {}

import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { LruCache } from '../util/lru.js';

// ajv-formats is CommonJS; under NodeNext its default import is the module object on some resolutions.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (
  ajv: Ajv | Ajv2020,
) => void;

export type ArgsCheck = { ok: true } | { ok: false; error: string };

/**
 * Validates model-produced tool arguments against each tool's inputSchema before the call reaches the server,
 * so malformed calls are answered with a precise message the model can learn from. Validators are compiled
 * once per tool. A schema ajv cannot compile is not held against the model: validation is skipped and the
 * server decides.
 */
export class ArgsValidator {
  /**
   * The validator of a tool list, shared by every rollout that offers the same tools (keyed by their names and
   * schemas). Compiling is the costly part — two ajv instances, their meta-schemas, one function per tool — and
   * a training run's rollouts all offer one list. Checking holds no state between calls, so sharing is safe.
   */
  static for(tools: { name: string; inputSchema: Record<string, unknown> }[]): ArgsValidator {
    const key = JSON.stringify(tools.map((t) => [t.name, t.inputSchema]));
    let v = shared.get(key);
    if (!v) shared.set(key, (v = new ArgsValidator(tools)));
    return v;
  }

  private readonly validators = new Map<string, ValidateFunction | null>();
  private readonly draft07 = makeAjv(false);
  private readonly draft2020 = makeAjv(true);
  /** Tools whose schema could not be compiled, with the reason (for rollout logs). */
  readonly uncompilable = new Map<string, string>();

  constructor(tools: { name: string; inputSchema: Record<string, unknown> }[]) {
    for (const t of tools) this.compile(t.name, t.inputSchema);
  }

  private compile(name: string, schema: Record<string, unknown>): void {
    const declared = typeof schema.$schema === 'string' ? schema.$schema : '';
    // `$schema` picks the dialect; drop it so ajv does not insist on having that meta-schema registered.
    const { $schema: _ignored, ...rest } = schema;
    const ajv = /2020-12|2019-09/.test(declared) ? this.draft2020 : this.draft07;
    try {
      this.validators.set(name, ajv.compile(rest));
    } catch (err) {
      this.validators.set(name, null);
      this.uncompilable.set(name, (err as Error).message);
    }
  }

  check(name: string, args: unknown): ArgsCheck {
    const validate = this.validators.get(name);
    if (!validate) return { ok: true };
    if (validate(args)) return { ok: true };
    return { ok: false, error: formatErrors(validate.errors ?? []) };
  }
}

/** Tool lists whose validators are kept (a process seldom meets more than a few servers). */
const shared = new LruCache<string, ArgsValidator>({ maxEntries: 16 });

function makeAjv(is2020: boolean): Ajv | Ajv2020 {
  const opts = { allErrors: true, strict: false, validateFormats: true } as const;
  const ajv = is2020 ? new Ajv2020(opts) : new Ajv(opts);
  addFormats(ajv);
  return ajv;
}

/** Short, model-readable: `/items/0/quantity must be >= 1; must have required property 'book_id'`. */
function formatErrors(errors: ErrorObject[]): string {
  const parts: string[] = [];
  for (const e of errors.slice(0, 5)) {
    const where = e.instancePath === '' ? 'arguments' : e.instancePath;
    let msg = `${where} ${e.message ?? 'is invalid'}`;
    if (e.keyword === 'enum' && Array.isArray((e.params as { allowedValues?: unknown[] }).allowedValues)) {
      msg += `: ${JSON.stringify((e.params as { allowedValues: unknown[] }).allowedValues)}`;
    }
    if (e.keyword === 'additionalProperties') {
      msg += ` ('${(e.params as { additionalProperty: string }).additionalProperty}')`;
    }
    parts.push(msg);
  }
  if (errors.length > 5) parts.push(`and ${errors.length - 5} more`);
  return parts.join('; ');
}

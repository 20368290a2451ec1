/**
 * Command-line options derived from a zod object schema, so that a setting's name, help text, default, bounds and
 * choices are written once, on the schema. One option per field: `rolloutsPerGroup` → `--rollouts-per-group <n>`,
 * its help is the field's description plus the schema's default, enums become choices, arrays of strings are
 * comma-separated lists, records are JSON objects. Numbers are left as the text given: the command hands its
 * options to the schema, whose parse reads, bounds and defaults them in one place (`mcprl train`:
 * trainConfigFromOptions in src/train/config.ts), so a schema with numeric fields needs that parse.
 *
 * The options carry no commander defaults: a value the user did not give stays undefined, and the schema fills in
 * its default when it parses the settings (so `--resume` can tell a given value from a default one).
 */
import { InvalidArgumentError, Option } from 'commander';
import { z } from 'zod';

interface JsonSchemaField {
  type?: string;
  description?: string;
  default?: unknown;
  enum?: unknown[];
  minItems?: number;
  items?: JsonSchemaField;
}

export const kebabCase = (key: string): string => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
export const snakeCase = (key: string): string => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
const camelFromKebab = (flag: string): string => flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());

const showDefault = (v: unknown): string => (Array.isArray(v) ? v.join(',') : String(v));

/** A JSON object given on the command line (an array, a string or a number is not one). */
function jsonObjectParser(text: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new InvalidArgumentError(`expected a JSON object, e.g. '{"enable_thinking": false}' (${(e as Error).message})`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new InvalidArgumentError(`expected a JSON object, got ${text}`);
  return value as Record<string, unknown>;
}

/** The fields of `schema` as their JSON Schema (input side: what a user may give). */
function fieldsOf(schema: z.ZodObject): [string, JsonSchemaField][] {
  const json = z.toJSONSchema(schema, { io: 'input' }) as { properties?: Record<string, JsonSchemaField> };
  return Object.entries(json.properties ?? {});
}

/** One commander Option per field of `schema`. Throws for a field type it cannot express as a flag. */
export function optionsFromSchema(schema: z.ZodObject): Option[] {
  return fieldsOf(schema).map(([key, f]) => {
    const flag = kebabCase(key);
    if (camelFromKebab(flag) !== key) throw new Error(`schema field ${key} does not survive commander's --${flag} → camelCase`);
    const help = [f.description ?? key, f.default !== undefined ? `(default: ${showDefault(f.default)})` : ''].filter(Boolean).join(' ');
    if (f.type === 'boolean') return new Option(`--${flag}`, help);
    if (f.type === 'integer' || f.type === 'number') return new Option(`--${flag} <${f.type === 'integer' ? 'n' : 'x'}>`, help);
    if (f.type === 'string' && f.enum) return new Option(`--${flag} <${flag}>`, help).choices(f.enum.map(String));
    if (f.type === 'string') return new Option(`--${flag} <value>`, help);
    if (f.type === 'array' && f.items?.type === 'string') {
      const min = f.minItems ?? 0;
      return new Option(`--${flag} <list>`, help).argParser((text: string) => {
        const list = text.split(',').map((s) => s.trim()).filter(Boolean);
        if (list.length < min) throw new InvalidArgumentError(`expected a comma-separated list of at least ${min}`);
        return list;
      });
    }
    if (f.type === 'object') return new Option(`--${flag} <json>`, help).argParser(jsonObjectParser);
    throw new Error(`schema field ${key}: no command-line form for type ${JSON.stringify(f.type)}`);
  });
}

/** Adds the options derived from `schema` to a command (see optionsFromSchema). */
export function addSchemaOptions<C extends { addOption(o: Option): C }>(cmd: C, schema: z.ZodObject): C {
  for (const o of optionsFromSchema(schema)) cmd.addOption(o);
  return cmd;
}

/** The values commander parsed for `schema`'s fields, keyed as the schema is; fields not given are left out. */
export function valuesFromOptions(schema: z.ZodObject, parsed: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.keys(schema.shape).filter((k) => parsed[k] !== undefined).map((k) => [k, parsed[k]]));
}

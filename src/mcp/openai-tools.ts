import type { OpenAITool } from '../chat/tool.js';
import type { ToolInfo } from './types.js';

export type { OpenAITool };

/**
 * JSON Schema keywords that function-calling APIs (OpenAI, Gemini, vLLM's guided decoding) reject or ignore
 * in tool parameters. `$ref`/`$defs` are resolved before this list is applied.
 */
const DROPPED_KEYWORDS = new Set([
  '$schema',
  '$id',
  '$anchor',
  '$comment',
  '$defs',
  'definitions',
  '$dynamicRef',
  '$dynamicAnchor',
  '$vocabulary',
  'examples',
  'readOnly',
  'writeOnly',
  'deprecated',
  'contentEncoding',
  'contentMediaType',
  'contentSchema',
  'if',
  'then',
  'else',
  'dependentSchemas',
  'dependentRequired',
  'dependencies',
  'unevaluatedProperties',
  'unevaluatedItems',
  'patternProperties',
  'propertyNames',
]);

/** Keywords whose value is a map from names to subschemas (the names are not keywords). */
const SCHEMA_MAPS = new Set(['properties']);
/** Keywords whose value is a subschema or an array of subschemas. */
const SUBSCHEMAS = new Set(['items', 'additionalProperties', 'anyOf', 'oneOf', 'allOf', 'not', 'prefixItems', 'contains']);

type Json = unknown;

function isObject(x: Json): x is Record<string, unknown> {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

/** Follows a local JSON pointer like `#/$defs/Item` inside `root`. */
function resolvePointer(root: Record<string, unknown>, ref: string): Json {
  if (ref === '#') return root;
  if (!ref.startsWith('#/')) return undefined;
  let node: Json = root;
  for (const raw of ref.slice(2).split('/')) {
    const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (!isObject(node) && !Array.isArray(node)) return undefined;
    node = (node as Record<string, unknown>)[key];
  }
  return node;
}

function clean(schema: Json, root: Record<string, unknown>, refStack: string[]): Json {
  if (Array.isArray(schema)) return schema.map((s) => clean(s, root, refStack));
  if (!isObject(schema)) return schema;

  if (typeof schema.$ref === 'string') {
    const ref = schema.$ref;
    const target = resolvePointer(root, ref);
    // A recursive or non-local reference cannot be inlined; an open object keeps the call possible.
    if (target === undefined || refStack.includes(ref)) {
      const { $ref: _ignored, ...rest } = schema;
      const fallback: Record<string, unknown> = { type: 'object' };
      const desc = typeof rest.description === 'string' ? rest.description : undefined;
      if (desc) fallback.description = desc;
      return fallback;
    }
    // Sibling keywords of $ref (description, default) refine the referenced schema.
    const { $ref: _ignored, ...siblings } = schema;
    const merged = { ...(isObject(target) ? target : {}), ...siblings };
    return clean(merged, root, [...refStack, ref]);
  }

  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema)) {
    if (DROPPED_KEYWORDS.has(key)) continue;
    if (SCHEMA_MAPS.has(key) && isObject(value)) {
      out[key] = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, clean(v, root, refStack)]));
    } else if (SUBSCHEMAS.has(key)) {
      out[key === 'oneOf' ? 'anyOf' : key] = clean(value, root, refStack);
    } else {
      out[key] = value;
    }
  }
  return out;
}

/** Converts one tool's inputSchema to function parameters: refs inlined, rejected keywords dropped. */
export function toFunctionParameters(inputSchema: Record<string, unknown>): Record<string, unknown> {
  const cleaned = clean(inputSchema, inputSchema, []) as Record<string, unknown>;
  // Function-calling APIs want an object at the top, with properties present even when empty.
  const params: Record<string, unknown> = { ...cleaned, type: 'object' };
  if (!isObject(params.properties)) params.properties = {};
  return params;
}

/**
 * Converts a tool catalog to OpenAI function tools. Names are kept as the server spells them, so a model's
 * call can be passed straight back to `McpSession.callTool`.
 */
export function toOpenAITools(tools: ToolInfo[]): OpenAITool[] {
  return tools.map((t) => ({
    type: 'function',
    function: {
      name: t.name,
      description: t.description || t.title || t.name,
      parameters: toFunctionParameters(t.inputSchema),
    },
  }));
}

/**
 * Bounds on a JSON request body's structure, checked on its bytes as they arrive, before JSON.parse builds anything.
 *
 * A body under the size cap can still take a server down: 20 MB of numbers is ten million array elements (each a
 * value in memory and, once invalid, a validation issue), and a tool schema nested 20,000 deep overflows the stack of
 * whatever walks it next (JSON.stringify, the template, a schema compiler). A reviver or a walk after JSON.parse is
 * too late: the tree already exists, and the walk itself recurses. So `JsonLimitScanner` reads the raw bytes once,
 * keeping only a stack of open containers (bounded by the depth limit), and refuses at the first byte past a limit:
 * nesting depth, elements of one array, members of one object, bytes of one string. It checks structure, not syntax:
 * JSON.parse still rejects malformed text afterwards, and the scanner is sound on any bytes (it never throws on
 * them, it only counts).
 *
 * Validation after the parse stops at the first invalid element (`safeParseFirst`): zod's default reports every one,
 * an issue object per bad element, which for ten million numbers is gigabytes.
 */
import type { z } from 'zod';
import { McprlError } from './errors.js';

export interface JsonLimits {
  /** Deepest nesting of arrays and objects (the top level is 1). Default 64. */
  maxDepth: number;
  /** Most elements in one array. Default 1,048,576 (a trajectory's token ids fit many times over). */
  maxArrayLength: number;
  /** Most members of one object. Default 65,536. */
  maxObjectKeys: number;
  /** Longest string (a key or a value), in bytes as sent, escapes included. Default 16 MiB. */
  maxStringBytes: number;
}

export const DEFAULT_JSON_LIMITS: Readonly<JsonLimits> = { maxDepth: 64, maxArrayLength: 1 << 20, maxObjectKeys: 1 << 16, maxStringBytes: 16 << 20 };

export type JsonLimitCode = 'JSON_TOO_DEEP' | 'JSON_ARRAY_TOO_LONG' | 'JSON_OBJECT_TOO_LARGE' | 'JSON_STRING_TOO_LONG';

/** A body past one of the limits; `field` is where (`tools.0.function.parameters.properties…`), or null at the top. */
export class JsonLimitError extends McprlError<JsonLimitCode> {
  readonly field: string | null;
  readonly limit: number;
  constructor(code: JsonLimitCode, message: string, field: string | null, limit: number) {
    super(code, field ? `${field}: ${message}` : message);
    this.field = field;
    this.limit = limit;
  }
}

interface Frame {
  array: boolean;
  /** Elements (array) or members (object) begun so far. */
  count: number;
  /** The current member's key (objects), decoded when short. */
  key: string;
  /** Objects: the next string is a key. */
  expectKey: boolean;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
/** Bytes that end a bare value (number, true, false, null): structure, quotes and whitespace. */
const DELIMITER = new Uint8Array(256);
for (const c of ',:[]{}" \t\r\n') DELIMITER[c.charCodeAt(0)] = 1;
/** Keys longer than this are shown as `…` in a field path. */
const KEY_SHOWN = 64;
/** A field path names this many levels at most (a 20,000-deep path is not a message). */
const PATH_SHOWN = 12;

/** Counts a JSON text's structure chunk by chunk; `push` throws JsonLimitError at the first byte past a limit. */
export class JsonLimitScanner {
  private readonly limits: JsonLimits;
  private readonly stack: Frame[] = [];
  private inString = false;
  private escaped = false;
  private stringBytes = 0;
  private stringIsKey = false;
  private keyBytes: number[] = [];
  private inBare = false;

  constructor(limits: Partial<JsonLimits> = {}) {
    this.limits = { ...DEFAULT_JSON_LIMITS, ...limits };
  }

  push(chunk: Uint8Array): void {
    const { limits, stack } = this;
    const n = chunk.length;
    let i = 0;
    while (i < n) {
      if (this.inString) {
        // The string's body: count its bytes until the closing quote (an escaped quote does not close it).
        const start = i;
        for (; i < n; i++) {
          const b = chunk[i];
          if (this.escaped) this.escaped = false;
          else if (b === BACKSLASH) this.escaped = true;
          else if (b === QUOTE) break;
          if (this.stringIsKey && this.keyBytes.length <= KEY_SHOWN) this.keyBytes.push(b);
        }
        this.stringBytes += i - start;
        if (this.stringBytes > limits.maxStringBytes) {
          this.fail('JSON_STRING_TOO_LONG', `a string over ${limits.maxStringBytes} bytes`, limits.maxStringBytes);
        }
        if (i === n) return;
        this.inString = false;
        if (this.stringIsKey) {
          const top = stack[stack.length - 1];
          top.key = this.keyBytes.length > KEY_SHOWN ? '…' : Buffer.from(this.keyBytes).toString('utf8');
        }
        i++;
        continue;
      }
      if (this.inBare) {
        while (i < n && DELIMITER[chunk[i]] === 0) i++;
        if (i === n) return;
        this.inBare = false;
      }
      const c = chunk[i++];
      switch (c) {
        case QUOTE: {
          const top = stack[stack.length - 1];
          this.stringIsKey = top !== undefined && !top.array && top.expectKey;
          if (this.stringIsKey) {
            top.expectKey = false;
            top.key = '';
            if (++top.count > limits.maxObjectKeys) this.fail('JSON_OBJECT_TOO_LARGE', `an object of more than ${limits.maxObjectKeys} members`, limits.maxObjectKeys, true);
            this.keyBytes = [];
          } else {
            this.beginValue();
          }
          this.inString = true;
          this.stringBytes = 0;
          break;
        }
        case 0x5b: // [
        case 0x7b: // {
          this.beginValue();
          if (stack.length + 1 > limits.maxDepth) this.fail('JSON_TOO_DEEP', `nested deeper than ${limits.maxDepth} levels`, limits.maxDepth);
          stack.push({ array: c === 0x5b, count: 0, key: '', expectKey: c === 0x7b });
          break;
        case 0x5d: // ]
        case 0x7d: // }
          stack.pop();
          break;
        case 0x2c: {
          // ,
          const top = stack[stack.length - 1];
          if (top && !top.array) top.expectKey = true;
          break;
        }
        case 0x3a: // :
        case 0x20:
        case 0x09:
        case 0x0a:
        case 0x0d:
          break;
        default:
          // A number, true, false or null (or bytes JSON.parse will refuse): one value.
          this.beginValue();
          this.inBare = true;
      }
    }
  }

  /** A value begins in the innermost container: an array counts it. */
  private beginValue(): void {
    const top = this.stack[this.stack.length - 1];
    if (top?.array && ++top.count > this.limits.maxArrayLength) {
      this.fail('JSON_ARRAY_TOO_LONG', `an array of more than ${this.limits.maxArrayLength} elements`, this.limits.maxArrayLength, true);
    }
  }

  /** Throws for the innermost container (`container`: the limit is the container's own, so the path ends there). */
  private fail(code: JsonLimitCode, message: string, limit: number, container = false): never {
    const frames = container ? this.stack.slice(0, -1) : this.stack;
    const parts = frames.map((f) => (f.array ? String(f.count - 1) : f.key));
    const field = parts.length === 0 ? null : parts.length > PATH_SHOWN ? `${parts.slice(0, PATH_SHOWN).join('.')}.…` : parts.join('.');
    throw new JsonLimitError(code, message, field, limit);
  }
}

/** Checks a whole JSON text at once (see JsonLimitScanner). */
export function checkJsonLimits(text: Uint8Array | string, limits: Partial<JsonLimits> = {}): void {
  new JsonLimitScanner(limits).push(typeof text === 'string' ? Buffer.from(text, 'utf8') : text);
}

/**
 * `schema.safeParse(value)` stopping at the first invalid element of every container (zod's own `abortEarly`,
 * which its `validate` uses): at most a few issues, whatever the size of the value.
 */
export function safeParseFirst<S extends z.ZodType>(schema: S, value: unknown): z.ZodSafeParseResult<z.output<S>> {
  return schema.safeParse(value, FIRST_ERRORS) as z.ZodSafeParseResult<z.output<S>>;
}

const FIRST_ERRORS: z.core.ParseContextInternal<z.core.$ZodIssue> = { abortEarly: true };

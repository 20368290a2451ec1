import { describe, expect, it } from 'vitest';
import { toOpenAITools, toFunctionParameters } from './openai-tools.js';
import type { ToolInfo } from './types.js';

const annotations = { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false };

describe('toOpenAITools', () => {
  it('inlines local $ref/$defs, drops rejected keywords, keeps enums, defaults and required', () => {
    const schema = {
      $schema: 'http://json-schema.org/draft-07/schema#',
      type: 'object',
      $defs: {
        Item: {
          type: 'object',
          properties: { sku: { type: 'string', examples: ['a'] }, size: { $ref: '#/$defs/Size' } },
          required: ['sku'],
        },
        Size: { type: 'string', enum: ['S', 'M', 'L'], default: 'M' },
      },
      properties: {
        items: { type: 'array', items: { $ref: '#/$defs/Item' }, minItems: 1 },
        mode: { oneOf: [{ const: 'a' }, { const: 'b' }], description: 'mode' },
        note: { $ref: '#/$defs/Size', description: 'overrides the description' },
      },
      required: ['items'],
      additionalProperties: false,
    };
    const params = toFunctionParameters(schema);
    expect(params).toEqual({
      type: 'object',
      properties: {
        items: {
          type: 'array',
          items: {
            type: 'object',
            properties: { sku: { type: 'string' }, size: { type: 'string', enum: ['S', 'M', 'L'], default: 'M' } },
            required: ['sku'],
          },
          minItems: 1,
        },
        mode: { anyOf: [{ const: 'a' }, { const: 'b' }], description: 'mode' },
        note: { type: 'string', enum: ['S', 'M', 'L'], default: 'M', description: 'overrides the description' },
      },
      required: ['items'],
      additionalProperties: false,
    });
    expect(JSON.stringify(params)).not.toContain('$');
  });

  it('turns a recursive reference into an open object instead of looping', () => {
    const schema = {
      type: 'object',
      definitions: { Node: { type: 'object', properties: { child: { $ref: '#/definitions/Node' } } } },
      properties: { root: { $ref: '#/definitions/Node' } },
    };
    expect(toFunctionParameters(schema)).toEqual({
      type: 'object',
      properties: { root: { type: 'object', properties: { child: { type: 'object' } } } },
    });
  });

  it('gives schema-less tools an empty object and falls back to the title for a missing description', () => {
    const tool: ToolInfo = { name: 'ping', title: 'Ping', description: '', inputSchema: { type: 'object' }, annotations };
    expect(toOpenAITools([tool])).toEqual([
      { type: 'function', function: { name: 'ping', description: 'Ping', parameters: { type: 'object', properties: {} } } },
    ]);
  });
});

import { describe, expect, it } from 'vitest';
import { ExportError } from '../src/export/errors.js';
import { McpConnectError } from '../src/mcp/errors.js';
import { McprlError } from '../src/util/errors.js';

describe('McprlError', () => {
  it('carries a code and the name of the class thrown, and subclasses are McprlErrors', () => {
    const base = new McprlError('RUN_DIR', 'state.json: step: expected a number');
    expect(base).toMatchObject({ code: 'RUN_DIR', name: 'McprlError', message: 'state.json: step: expected a number' });
    const cause = new Error('ECONNREFUSED');
    const sub = new McpConnectError('UNREACHABLE', 'nothing answered', { cause });
    expect(sub).toBeInstanceOf(McprlError);
    expect(sub).toMatchObject({ code: 'UNREACHABLE', name: 'McpConnectError', cause });
    expect(new ExportError('MISSING_FILE', 'x').name).toBe('ExportError');
  });
});

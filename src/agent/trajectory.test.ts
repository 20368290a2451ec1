import { describe, expect, it } from 'vitest';
import { wasExecuted } from './trajectory.js';

describe('wasExecuted', () => {
  it('follows a tool answer\'s execution when it has one', () => {
    expect(wasExecuted({ content: 'ok', execution: 'executed' })).toBe(true);
    expect(wasExecuted({ content: 'Error: the book does not exist', execution: 'executed' })).toBe(true);
    expect(wasExecuted({ content: 'ok', execution: 'not_executed' })).toBe(false);
    expect(wasExecuted({ content: 'ok', execution: 'unknown' })).toBe(false);
  });

  it('reads answers recorded without one: the loop\'s not-executed answers and the session\'s unknown tools and lost connections do not count', () => {
    expect(wasExecuted({ content: '{"id": "bk-001"}' })).toBe(true);
    expect(wasExecuted({ content: 'Error: no book bk-999' })).toBe(true);
    expect(wasExecuted({ content: 'Error: invalid tool call. Unknown tool "x".' })).toBe(false);
    expect(wasExecuted({ content: 'Not executed: complete_task was already called in this turn.' })).toBe(false);
    expect(wasExecuted({ content: "Error: Unknown tool 'get_book'. This server's tools are: list_branches." })).toBe(false);
    expect(wasExecuted({ content: "Error: Tool 'crash' failed: the connection to the server was lost during the call (closed); it is not known whether the tool ran." })).toBe(false);
  });
});

import { describe, expect, it } from 'vitest';
import type { Scenario } from '../scenarios/scenario.js';
import { formatQuality, isChain, namesTool, toolNaming } from './quality.js';

const scenario = (task: string, args: Record<string, unknown>): Scenario => ({
  id: 's',
  task,
  difficulty: 1,
  source: 'schema',
  checks: [{ kind: 'answer_value', value: 'Dune', via: [{ tool: 'get_book', args }] }],
});

describe('quality of a scenario set', () => {
  it('a task names a tool when a tool name with a separator or inner capital is a word of it', () => {
    const tools = ['get_book', 'check_stock', 'echo', 'getTinyImage'].map((name) => ({ name }));
    expect(namesTool('Use get_book to find the title of bk-021.', tools)).toBe(true);
    expect(namesTool('Call getTinyImage, please.', tools)).toBe(true);
    expect(namesTool('What is the title of the book bk-021?', tools)).toBe(false);
    // A plain word is an ordinary word.
    expect(namesTool('Echo back "hi".', tools)).toBe(false);
  });

  it('a task names a tool in words, or an argument key in words or followed by its value', () => {
    const tools = [
      { name: 'search_nodes', inputSchema: { type: 'object', properties: { query: { type: 'string' } } } },
      { name: 'open_nodes', inputSchema: { type: 'object', properties: { names: { type: 'array', items: { type: 'string' } } } } },
      { name: 'create_entities', inputSchema: { type: 'object', properties: { entities: { type: 'array', items: { type: 'object', properties: { name: {}, entityType: {} } } } } } },
      { name: 'read_text_file', inputSchema: { type: 'object', properties: { path: { type: 'string' }, tail: { type: 'number' } } } },
      { name: 'directory_tree', inputSchema: { type: 'object', properties: { path: {}, excludePatterns: {} } } },
    ];
    // Today's wording of server-memory's and server-filesystem's tasks.
    expect(toolNaming('Find out the name you get if you search nodes with query "Lindqvist".', tools)).toBe('search_nodes');
    expect(toolNaming('Run open nodes for names ["Mira Okafor","Priya Raman"].', tools)).toBe('open_nodes');
    expect(toolNaming('Can you read text file for path "{sandbox}/trips/porto.md"?', tools)).toBe('read_text_file');
    expect(toolNaming('Please read the file {sandbox}/todo.txt and tail 6; what result comes back?', tools)).toBe('tail');
    expect(toolNaming('List the entries of {sandbox}/trips and exclude patterns ["*.md"].', tools)).toBe('excludePatterns');
    expect(toolNaming('What is the entity type of "Tomas Lindqvist"?', tools)).toBe('entityType');
    // Plain English about the same things names none.
    expect(toolNaming('What type of entity is "Tomas Lindqvist"?', tools)).toBeUndefined();
    expect(toolNaming('Which entities mention "Lisbon"? Give their names.', tools)).toBeUndefined();
    expect(toolNaming('What is the last line of the file {sandbox}/todo.txt?', tools)).toBeUndefined();
    expect(toolNaming('Which files in the folder {sandbox} match *.md? Give the path of each.', tools)).toBeUndefined();
  });

  it('a chain is a task whose checked call takes a value the task does not state', () => {
    expect(isChain(scenario('What is the title of the book bk-021?', { book_id: 'bk-021' }))).toBe(false);
    expect(isChain(scenario('What is the year of the book "Dune"?', { book_id: 'bk-021' }))).toBe(true);
    expect(isChain({ ...scenario('Hello there', {}), checks: [{ kind: 'answer_contains', value: 'x' }] })).toBe(false);
  });

  it('renders the data it is given', () => {
    const text = formatQuality({ scenarios: 9, namingTool: 1, chains: 2, measured: 7, oraclePassIdleFail: 6, randomPass: 3 }).join('\n');
    expect(text).toMatch(/9 tasks: 1 name a tool, 2 chains/);
    expect(text).toMatch(/of 7 read-only tasks: 6 passed by an oracle and failed by a do-nothing agent, 3 passed by one random call/);
  });
});

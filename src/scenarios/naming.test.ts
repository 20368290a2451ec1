import { describe, expect, it } from 'vitest';
import { namesTool, toolNaming } from './naming.js';

describe('a task that names a tool', () => {
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
});

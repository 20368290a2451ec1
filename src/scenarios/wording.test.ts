import { describe, expect, it } from 'vitest';
import type { ToolInfo } from '../mcp/index.js';
import { label } from './offline/index.js';
import { convertsToOwnUnit, fieldWords, subjectOf, writeSentence } from './offline/phrasing.js';

const tool = (name: string, properties: Record<string, unknown> = {}): ToolInfo => ({ name, description: '', inputSchema: { type: 'object', properties }, annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false } }) as ToolInfo;
const isFolder = (p: string) => !/\.\w+$/.test(p);

describe('natural wording of offline tasks', () => {
  it('says field names as words, with units spelled out, and a record\'s own kind or id as a person would', () => {
    expect(label('price_usd')).toBe('price in USD');
    expect(label('heightCm')).toBe('height in cm');
    expect(fieldWords('entityType', 'entity')).toBe('type');
    expect(fieldWords('branch_id')).toBe('id of the branch');
    expect(fieldWords('book_ids')).toBe('ids of the books');
    expect(fieldWords('converted')).toBe('converted value');
  });

  it('says what a call is about from its arguments, never their keys', () => {
    expect(subjectOf(tool('get_book'), { book_id: 'bk-7' }, { isFolder })?.subject).toBe('the book bk-7');
    expect(subjectOf(tool('search_nodes'), { query: 'Atlas' }, { noun: 'entity', many: true, isFolder })?.subject).toBe('the entities matching "Atlas"');
    expect(subjectOf(tool('open_nodes'), { names: ['Ada', 'Bob'] }, { isFolder })?.subject).toBe('"Ada" and "Bob"');
    expect(subjectOf(tool('get_file_info'), { path: '{sandbox}/a.txt' }, { isFolder })?.subject).toBe('the file "{sandbox}/a.txt"');
    expect(subjectOf(tool('search_files'), { path: '{sandbox}', pattern: '*.md' }, { isFolder })?.subject).toBe('the files named *.md in the folder "{sandbox}"');
    expect(subjectOf(tool('get-sum', { a: { type: 'number' }, b: { type: 'number' } }), { a: 3, b: 4 }, { isFolder })?.subject).toBe('the sum of 3 and 4');
    const convert = tool('convert_price', { amount: { type: 'number', description: 'Amount in USD.' }, currency: { type: 'string' } });
    expect(subjectOf(convert, { amount: 7, currency: 'EUR' }, { isFolder })?.subject).toBe('7 USD in EUR');
    // Converting to the currency the amount is in asks nothing.
    expect(subjectOf(convert, { amount: 7, currency: 'USD' }, { isFolder })).toBeUndefined();
    expect(convertsToOwnUnit(convert, { amount: 7, currency: 'USD' })).toBe(true);
    // A filter is said with what it filters, the value first ('genre "children"' would read as an argument).
    const search = tool('search_books', { query: { type: 'string' }, genre: { type: 'string' } });
    expect(subjectOf(search, { query: 'Silent', genre: 'children' }, { noun: 'book', isFolder })?.subject).toBe('the book of the "children" genre matching "Silent"');
  });

  it('says a write as the change it makes: links, new things with notes, notes added, amounts, folders', () => {
    const say = (name: string, args: Record<string, unknown>) => writeSentence(tool(name), args, isFolder)?.subject;
    expect(say('create_relations', { relations: [{ from: 'Ada', to: 'Engine', relationType: 'works on' }] })).toBe('record that "Ada" works on "Engine"');
    expect(say('create_entities', { entities: [{ name: 'Grace Hopper', entityType: 'person', observations: ['wrote a compiler'] }] })).toBe('add the person "Grace Hopper" with the notes "wrote a compiler"');
    expect(say('add_observations', { observations: [{ entityName: 'Ada', contents: ['x1', 'y2'] }] })).toBe('add "x1" and "y2" to what is recorded about "Ada"');
    expect(say('restock', { book_id: 'bk-7', quantity: 3 })).toBe('restock 3 of the book bk-7');
    expect(say('create_directory', { path: '{sandbox}/trips/bills' })).toBe('create a folder named "bills" in the folder "{sandbox}/trips"');
    expect(say('edit_file', { path: '{sandbox}/a.txt', edits: [{ oldText: 'one', newText: 'two' }] })).toBe('replace "one" with "two" in the file "{sandbox}/a.txt"');
  });
});

import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { makeRng } from '../random-model.js';
import { HELD_OUT_TOOLS } from './held-out.js';
import { openCopyDrill, openDrill, withVocabulary, wordTokens } from './open-drills.js';

const strings = (v: unknown): string[] => (typeof v === 'string' ? [v] : Array.isArray(v) ? v.flatMap(strings) : v && typeof v === 'object' ? Object.values(v).flatMap(strings) : []);

describe('openDrill', () => {
  const drills = Array.from({ length: 400 }, (_, i) => openDrill(makeRng(i + 1)));

  it('writes only values copied from the task or an earlier result (a folder and a name joined for a path), and answers with copies too', () => {
    for (const d of drills) {
      let seen = d.messages[1].content!;
      const copied = (v: string) => seen.includes(v) || (v.includes('/') && seen.includes(v.slice(0, v.lastIndexOf('/'))) && seen.includes(`"${v.slice(v.lastIndexOf('/') + 1)}"`));
      for (const m of d.messages.slice(2)) {
        if (m.role === 'tool') seen += `\n${m.content}`;
        for (const c of m.tool_calls ?? []) {
          const args = JSON.parse(c.function.arguments) as Record<string, unknown>;
          const values = c.function.name === 'complete_task' ? String(args.summary).split(', ').filter((v) => v !== 'Done.') : strings(args);
          for (const v of values) expect(copied(v), `${c.function.name}: ${v} in ${d.messages[1].content}`).toBe(true);
        }
      }
    }
  });

  it('calls its tools with arguments valid for their schemas, and ends with complete_task', () => {
    const ajv = new Ajv({ strict: false });
    for (const d of drills) {
      expect(d.messages.at(-2)!.tool_calls![0].function.name).toBe('complete_task');
      for (const m of d.messages) {
        for (const c of m.tool_calls ?? []) {
          const t = d.tools.find((x) => x.function.name === c.function.name);
          expect(t, c.function.name).toBeDefined();
          expect(ajv.validate(t!.function.parameters!, JSON.parse(c.function.arguments)), `${c.function.name}: ${ajv.errorsText()}`).toBe(true);
        }
      }
    }
  });

  it('makes up tool names and keys afresh (hundreds of each: nothing to memorise) and never names a tool of the held-out published servers', () => {
    const names = new Set(drills.flatMap((d) => d.tools.map((t) => t.function.name)));
    const keys = new Set(drills.flatMap((d) => d.tools.flatMap((t) => Object.keys((t.function.parameters as { properties: object }).properties))));
    for (const held of HELD_OUT_TOOLS) expect(names.has(held), held).toBe(false);
    expect(names.size).toBeGreaterThan(500);
    expect(keys.size).toBeGreaterThan(300);
    expect(openDrill(makeRng(7))).toEqual(openDrill(makeRng(7)));
  });

  it('lists as many tools as a published server does (server-filesystem: 14 and complete_task), with optional arguments', () => {
    const sizes = drills.map((d) => d.tools.length);
    expect(Math.min(...sizes)).toBeLessThanOrEqual(4);
    expect(Math.max(...sizes)).toBeGreaterThanOrEqual(13);
    expect(drills.some((d) => d.tools.some((t) => Object.keys((t.function.parameters as { properties: object }).properties).length > ((t.function.parameters as { required?: string[] }).required ?? []).length))).toBe(true);
  });

  it('draws writes of objects, links, paths made in a folder, file reads, folder listings and walks, files found by a pattern, file metadata, look-ups and find-then-write chains', () => {
    const has = (f: (d: (typeof drills)[number]) => boolean) => drills.some(f);
    const firstArgs = (d: (typeof drills)[number]) => JSON.parse(d.messages[2].tool_calls![0].function.arguments) as Record<string, unknown>;
    expect(has((d) => d.messages.filter((m) => m.role === 'assistant').length === 3)).toBe(true);
    expect(has((d) => Object.values(firstArgs(d)).some((v) => Array.isArray(v) && typeof v[0] === 'object'))).toBe(true);
    expect(has((d) => /folder named|new (folder|directory)/.test(d.messages[1].content!))).toBe(true);
    expect(has((d) => /first lines of the files/.test(d.messages[1].content!))).toBe(true);
    expect(has((d) => /entries of the folder|every entry/.test(d.messages[1].content!))).toBe(true);
    expect(has((d) => /record that "/.test(d.messages[1].content!))).toBe(true);
    expect(has((d) => /noted as "/.test(d.messages[1].content!))).toBe(true);
    expect(has((d) => /files named \*\*?\/?\*?\.\w+ in the folder/.test(d.messages[1].content!))).toBe(true);
    expect(has((d) => /anywhere under the folder/.test(d.messages[1].content!) && /"children"/.test(d.messages[3].content!))).toBe(true);
    expect(has((d) => /(size|permissions)/.test(d.messages[1].content!) && /permissions: \d+/.test(d.messages[3].content!))).toBe(true);
  });
});

describe('openCopyDrill', () => {
  it('asks for values the message holds', () => {
    for (let i = 1; i <= 200; i++) {
      const [user, assistant] = openCopyDrill(makeRng(i));
      for (const v of assistant.content!.split(', ')) expect(user.content).toContain(v);
    }
  });
});

describe('withVocabulary', () => {
  const words = ['Lindqvist', 'March', 'quorum'];
  const text = (d: { messages: { content: string | null }[] }) => d.messages.map((m) => m.content ?? '').join('\n');

  it('draws a share of the words from the vocabulary given, and nothing changes at share 0', () => {
    const plain = Array.from({ length: 50 }, (_, i) => openDrill(makeRng(i + 1)));
    expect(Array.from({ length: 50 }, (_, i) => openDrill(withVocabulary(makeRng(i + 1), words, 0)))).toEqual(plain);
    const drawn = Array.from({ length: 100 }, (_, i) => text(openDrill(withVocabulary(makeRng(i + 1), words, 0.5))));
    for (const w of words) expect(drawn.filter((t) => t.includes(w)).length).toBeGreaterThan(5);
    expect(plain.filter((d) => words.some((w) => text(d).includes(w))).length).toBe(0);
    // copies too, still of values the message holds
    for (let i = 1; i <= 100; i++) {
      const [user, assistant] = openCopyDrill(withVocabulary(makeRng(i), words, 1));
      for (const v of assistant.content!.split(', ')) expect(user.content).toContain(v);
    }
    expect(() => withVocabulary(makeRng(1), [], 0.5)).toThrow(/no words/);
  });

  it('wordTokens: the tokens that are a word or a piece of one, without their space', () => {
    const vocab = [' Lindqvist', 'ity', ' the', 'a', ' 12', '", "', ' x', 'Type', ' Lindqvist'];
    expect(wordTokens((id) => vocab[id], vocab.length)).toEqual(['Lindqvist', 'ity', 'the', 'Type']);
  });
});

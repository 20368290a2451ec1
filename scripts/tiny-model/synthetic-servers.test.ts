import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rollout } from '../../src/agent/rollout.js';
import { McpSession, SafetyPolicy, type ToolInfo } from '../../src/mcp/index.js';
import { scoreChecks } from '../../src/ruler/checks.js';
import type { Scenario } from '../../src/scenarios/index.js';
import { GeneralExpertPolicy } from './general-expert.js';
import { HELD_OUT_TOOLS } from './held-out.js';
import { rawInitialize } from '../../test/mcp-server-helpers.js';
import { serveSynthetic, SYNTHETIC_KINDS, syntheticSpec, type SyntheticHost } from './synthetic-servers.js';

let host: SyntheticHost;
const policy = new SafetyPolicy({ allowUnisolatedWrites: true });
const open = (index: number) => McpSession.connect({ kind: 'http', url: host.url(index) }, { policy });

beforeAll(async () => {
  host = await serveSynthetic();
});
afterAll(async () => {
  await host.close();
});

type Schema = { type?: string; properties?: Record<string, Schema>; items?: Schema; enum?: string[] };

/** Arguments for `tool` built from its schema and what the server showed (a name, an id, a folder, a file). */
function argsFor(tool: ToolInfo, known: { name: string; id?: string; folder?: string; file?: string }): Record<string, unknown> {
  const value = (key: string, s: Schema): unknown => {
    if (s.enum) return s.enum[0];
    if (s.type === 'array') return [value(key, s.items ?? {})];
    if (s.type === 'object') return Object.fromEntries(Object.entries(s.properties ?? {}).map(([k, v]) => [k, value(k, v)]));
    if (/id$/i.test(key)) return known.id;
    if (/path$/i.test(key)) return /folder|shelf|drawer|notes$|drafts$|reports$|plans$|recipes$|lessons$/.test(tool.name) ? known.folder : known.file;
    if (/^(query|pattern|nameContains|name_contains)$/.test(key)) return known.name.split(/[ /.]/).filter(Boolean).pop();
    return known.name;
  };
  const props = (tool.inputSchema as Schema).properties ?? {};
  return Object.fromEntries(Object.entries(props).map(([k, s]) => [k, value(k, s)]));
}

describe('synthetic servers', () => {
  it('are drawn from their index alone, in both shapes, and name no tool of the held-out published servers', async () => {
    expect(syntheticSpec(7)).toEqual(syntheticSpec(7));
    expect(new Set(Array.from({ length: SYNTHETIC_KINDS }, (_, i) => syntheticSpec(i).shape))).toEqual(new Set(['records', 'folder']));
    const names = new Set<string>();
    for (let i = 0; i < SYNTHETIC_KINDS; i++) {
      const s = await open(i);
      for (const t of await s.listTools()) names.add(t.name);
      await s.close();
    }
    for (const held of HELD_OUT_TOOLS) expect(names.has(held), held).toBe(false);
    expect(names.size).toBeGreaterThan(40);
  });

  it('each lists its tools and answers every one of them through the MCP client, reads and writes alike', async () => {
    for (let i = 0; i < SYNTHETIC_KINDS; i++) {
      const s = await open(i);
      const tools = await s.listTools();
      const list = tools.find((t) => t.annotations.readOnlyHint && /^(list|show)_/.test(t.name) && !((t.inputSchema as { required?: string[] }).required ?? []).length);
      expect(list, `${syntheticSpec(i).name}: a tool that lists without a path`).toBeDefined();
      const listed = await s.callTool(list!.name, {});
      expect(listed.isError, listed.text).toBe(false);
      const known = syntheticSpec(i).shape === 'records'
        ? { name: /"name": "([^"]+)"/.exec(listed.text)![1], id: /"id": "([^"]+)"/.exec(listed.text)?.[1] }
        : { name: 'x', folder: listed.text.split('\n')[0] };
      if (syntheticSpec(i).shape === 'folder') {
        const lister = tools.find((t) => /^list_(folder|shelf|drawer)$/.test(t.name))!;
        const entries = await s.callTool(lister.name, { [Object.keys((lister.inputSchema as Schema).properties!)[0]]: known.folder });
        const file = /^\[\w+\] (\S+\.(md|txt))$/m.exec(entries.text)![1];
        Object.assign(known, { file: `${known.folder}/${file}`, name: file });
      }
      for (const t of tools) {
        const args = argsFor(t, known);
        if (t.annotations.readOnlyHint === false && syntheticSpec(i).shape === 'folder') {
          const key = Object.keys(args).find((k) => /path$/i.test(k))!;
          args[key] = `${known.folder}/fresh-${t.name}${/folder/.test(t.name) ? '' : '.md'}`;
        }
        const out = await s.callTool(t.name, args);
        expect(out.isError, `${syntheticSpec(i).name} ${t.name}(${JSON.stringify(args)}): ${out.text}`).toBe(false);
        expect(out.text.length).toBeGreaterThan(0);
      }
      await s.close();
    }
  });

  it('gives every session its own state: a write on one is not seen on the next', async () => {
    const a = await open(0);
    const tools = await a.listTools();
    const create = tools.find((t) => !t.annotations.readOnlyHint && /_plants$/.test(t.name) && /"name"/.test(JSON.stringify(t.inputSchema)))!;
    const find = tools.find((t) => /^(search|find|query)_plants$/.test(t.name))!;
    const [itemsKey, items] = Object.entries((create.inputSchema as Schema).properties!)[0];
    const item = Object.fromEntries(Object.keys(items.items!.properties!).map((k) => [k, k === 'name' ? 'Zebra Cactus' : /notes|facts|remarks/.test(k) ? ['new'] : 'succulent']));
    expect((await a.callTool(create.name, { [itemsKey]: [item] })).isError).toBe(false);
    expect((await a.callTool(find.name, { query: 'Zebra' })).text).toContain('Zebra Cactus');
    await a.close();
    const b = await open(0);
    expect((await b.callTool(find.name, { query: 'Zebra' })).text).not.toContain('Zebra Cactus');
    await b.close();
  });
});


describe('serveSynthetic over HTTP', () => {
  it('refuses a foreign Host (DNS rebinding) and a foreign Origin (a web page), and serves its own', async () => {
    const url = host.url(0);
    expect(await rawInitialize(url, { host: 'evil.example' })).toBe(403);
    expect(await rawInitialize(url, { origin: 'http://evil.example' })).toBe(403);
    expect(await rawInitialize(url, { origin: new URL(url).origin })).toBe(200);
  });
});

describe('GeneralExpertPolicy', () => {
  const solve = async (index: number, scenario: Scenario) => {
    const s = await open(index);
    const t = await rollout({ policy: new GeneralExpertPolicy(scenario), session: s, tools: await s.listTools(), scenario, id: scenario.id });
    await s.close();
    return t;
  };

  it('solves a write task and a value task of a synthetic server from their checks, through the real rollout loop', async () => {
    const s = await open(0);
    const tools = await s.listTools();
    await s.close();
    const create = tools.find((t) => !t.annotations.readOnlyHint && /_plants$/.test(t.name) && /"name"/.test(JSON.stringify(t.inputSchema)))!;
    const find = tools.find((t) => /^(search|find|query)_plants$/.test(t.name))!;
    const [itemsKey, items] = Object.entries((create.inputSchema as Schema).properties!)[0];
    const item = Object.fromEntries(Object.keys(items.items!.properties!).map((k) => [k, k === 'name' ? 'Zebra Cactus' : /notes|facts|remarks/.test(k) ? ['new'] : 'succulent']));
    const write: Scenario = {
      id: 'w', task: 'Add the plant "Zebra Cactus", a succulent.', difficulty: 2, source: 'schema',
      checks: [{ kind: 'tool_called', tool: create.name, args: { [itemsKey]: [item] } }, { kind: 'state_contains', tool: find.name, args: { query: 'Zebra' }, value: 'Zebra Cactus' }],
    };
    const w = await solve(0, write);
    expect(scoreChecks(w, write).fraction).toBe(1);
    expect(w.final_answer).toBe('Done.');

    const listed = await (async () => {
      const x = await open(0);
      const out = await x.callTool(find.name, { query: '' });
      await x.close();
      return JSON.parse(out.text) as Record<string, { name: string }[]>;
    })();
    const first = Object.values(listed).find(Array.isArray)![0];
    const read: Scenario = {
      id: 'r', task: `Search plants for "${first.name.split(' ')[1]}": what is the name?`, difficulty: 1, source: 'schema',
      checks: [{ kind: 'answer_value', value: first.name, via: [{ tool: find.name, args: { query: first.name.split(' ')[1] } }] }],
    };
    const r = await solve(0, read);
    expect(scoreChecks(r, read).fraction).toBe(1);
    expect(r.final_answer).toBe(first.name);
  });

  it('looks an unstated argument up with the server’s search tool on the task’s quoted phrase (a chain)', async () => {
    const s = await open(0);
    const tools = await s.listTools();
    const find = tools.find((t) => /^(search|find|query)_plants$/.test(t.name))!;
    const all = JSON.parse((await s.callTool(find.name, { query: '' })).text) as Record<string, { name: string; [k: string]: unknown }[]>;
    await s.close();
    const notesKey = ['notes', 'facts', 'remarks'].find((k) => k in Object.values(all).find(Array.isArray)![0])!;
    const target = Object.values(all).find(Array.isArray)!.find((e) => (e[notesKey] as string[]).length > 0)!;
    const note = (target[notesKey] as string[])[0];
    const open_ = tools.find((t) => /^open_plants$|^(get|fetch|show|lookup)_plant$/.test(t.name))!;
    const key = Object.keys((open_.inputSchema as Schema).properties!)[0];
    const args = { [key]: key === 'names' ? [target.name] : target.id };
    const chain: Scenario = {
      id: 'c', task: `Open the plant whose ${notesKey} include "${note}".`, difficulty: 5, source: 'schema',
      checks: [{ kind: 'tool_called', tool: open_.name, args }],
    };
    const t = await solve(0, chain);
    const calls = t.messages.flatMap((m) => (m.tool_calls ?? []).map((c) => c.function.name));
    expect(calls).toEqual([find.name, open_.name, 'complete_task']);
    expect(scoreChecks(t, chain).fraction).toBe(1);
  });
});

/** The published reference server, @modelcontextprotocol/server-everything, over stdio and streamable HTTP. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, toOpenAITools, type McpSession, type Target } from '../src/mcp/index.js';
import { everythingStdioTarget, isAlive, startEverythingHttp, type RunningHttpServer } from './helpers/servers.js';

function behaves(name: string, makeTarget: () => Promise<Target>) {
  describe(`server-everything over ${name}`, () => {
    let s: McpSession;
    beforeAll(async () => {
      s = await connect(await makeTarget());
    });
    afterAll(async () => {
      await s?.close();
    });

    it('lists tools with annotations (defaults filled), resources, templates and prompts', async () => {
      expect(s.server.name).toBe('mcp-servers/everything');
      const tools = await s.listTools();
      const byName = new Map(tools.map((t) => [t.name, t]));
      for (const n of ['echo', 'get-sum', 'get-tiny-image', 'get-structured-content']) expect(byName.has(n)).toBe(true);
      expect(byName.get('get-structured-content')!.annotations).toEqual({
        readOnlyHint: true,
        destructiveHint: false,
        idempotentHint: true,
        openWorldHint: false,
      });
      expect(byName.get('get-structured-content')!.outputSchema).toMatchObject({ type: 'object' });
      for (const t of tools) {
        expect(typeof t.annotations.readOnlyHint).toBe('boolean');
        expect(typeof t.annotations.destructiveHint).toBe('boolean');
        expect(typeof t.annotations.idempotentHint).toBe('boolean');
        expect(typeof t.annotations.openWorldHint).toBe('boolean');
      }
      // Every tool converts to an OpenAI function without $-keywords left over.
      const fns = toOpenAITools(tools);
      expect(fns).toHaveLength(tools.length);
      for (const f of fns) {
        expect(f.function.parameters?.type).toBe('object');
        expect(JSON.stringify(f.function.parameters)).not.toMatch(/"\$(ref|defs|schema)"/);
      }
      expect((await s.listResources()).length).toBeGreaterThan(0);
      expect((await s.listResourceTemplates()).length).toBeGreaterThan(0);
      expect((await s.listPrompts()).length).toBeGreaterThan(0);
    });

    it('calls tools: text, validated structured content, an image summary', async () => {
      expect(await s.callTool('echo', { message: 'hello' })).toMatchObject({ isError: false, text: 'Echo: hello' });
      const sum = await s.callTool('get-sum', { a: 2, b: 40 });
      expect(sum.text).toContain('42');
      const weather = await s.callTool('get-structured-content', { location: 'Chicago' });
      expect(weather.isError).toBe(false);
      expect(weather.structuredContent).toEqual({ temperature: 36, conditions: 'Light rain / drizzle', humidity: 82 });
      const image = await s.callTool('get-tiny-image', {});
      expect(image.text).toMatch(/\[image: image\/png, \d+ bytes\]/);
      expect(image.text).not.toMatch(/[A-Za-z0-9+/]{200}/); // no base64 payload for the model
    });

    it('answers invalid arguments with a tool error, not an exception', async () => {
      const r = await s.callTool('get-sum', { a: 'two' });
      expect(r.isError).toBe(true);
    });
  });
}

let http: RunningHttpServer | undefined;
afterAll(async () => {
  await http?.stop();
});

behaves('stdio', async () => everythingStdioTarget());
behaves('streamable HTTP', async () => {
  http = await startEverythingHttp();
  return { kind: 'http', url: http.url };
});

describe('server-everything: a task-only tool', () => {
  it('is called as an MCP task (execution.taskSupport required) and returns its result like any tool', async () => {
    // Isolated: the tool is not read-only, so the safety policy lets it run only on a server of the session's own.
    const s = await connect(everythingStdioTarget(), { isolated: true, stateInMemory: true });
    try {
      const tool = (await s.listTools()).find((t) => t.name === 'simulate-research-query');
      expect(tool?.taskSupport).toBe('required');
      // A plain tools/call is refused by the server ("requires task-based execution"); as a task it runs its four
      // stages and the final result comes back like any tool's.
      const r = await s.callTool('simulate-research-query', { topic: 'tides' });
      expect(r.isError, r.text).toBe(false);
      expect(r.text).toContain('# Research Report: tides');
    } finally {
      await s.close();
    }
  }, 60_000);
});

describe('server-everything lifecycle', () => {
  it('close() stops the stdio server process', async () => {
    const s = await connect(everythingStdioTarget());
    const pid = s.pid!;
    expect(isAlive(pid)).toBe(true);
    await s.close();
    expect(isAlive(pid)).toBe(false);
  });
});

/**
 * Checks that one random call cannot pass (the quality table's randomPass). A task's answer must be the asked call's
 * own: when another value of what the task states gives the same answer (server-everything's weather: Chicago's
 * humidity is New York's; its resource reference: a blob's MIME type is a text's), the checks cannot tell the asked
 * call from another, so no such task is made (run on the real server-everything, its list cut to those two tools so
 * generation is quick). And a reply that dumps every record (server-memory's read_graph) is no answer to what one
 * record's list says (an entity's observations): the other records' lists are the check's `others`.
 */
import { describe, expect, it } from 'vitest';
import { connect, SafetyPolicy } from '../src/mcp/index.js';
import type { JsonSchema } from '../src/scenarios/json-schema-args.js';
import { generateOfflineScenarios, type ScenarioServer } from '../src/scenarios/offline/index.js';
import { answerContains, checkedCalls } from '../src/scenarios/scenario.js';
import { everythingStdioTarget, memoryTarget, SEEDED_MEMORY, folderWithSeededMemory } from './helpers/servers.js';

const TOOLS = ['get-structured-content', 'get-resource-reference'];

describe('answers that other values of the task\'s arguments give too', () => {
  it('make no task: every kept answer differs for every other enum value of the call', async () => {
    const session = await connect(everythingStdioTarget(), { policy: new SafetyPolicy({}) });
    try {
      const tools = (await session.listTools()).filter((t) => TOOLS.includes(t.name));
      const server: ScenarioServer = { listTools: async () => tools, callTool: (n, a, o) => session.callTool(n, a, o), policy: session.policy };
      const { scenarios } = await generateOfflineScenarios(server, { count: 16, seed: 1 });
      expect(scenarios.length).toBeGreaterThan(4);
      let contrasted = 0;
      for (const s of scenarios) {
        const values = (s.checks ?? []).flatMap((c) => (c.kind === 'answer_value' || c.kind === 'answer_contains' ? [c.value] : []));
        for (const c of checkedCalls(s.checks ?? [])) {
          const props = (tools.find((t) => t.name === c.tool)!.inputSchema.properties ?? {}) as Record<string, JsonSchema>;
          for (const [k, schema] of Object.entries(props)) {
            if (!Array.isArray(schema.enum)) continue;
            // An argument left out takes its default: that value is the asked call.
            for (const v of schema.enum.filter((x) => x !== (k in c.args ? c.args[k] : schema.default))) {
              const out = await session.callTool(c.tool, { ...c.args, [k]: v });
              contrasted++;
              expect(values.every((x) => answerContains(out.text, x)), `${s.task} → ${values.join(', ')} also for ${k} = ${String(v)}`).toBe(false);
            }
          }
        }
      }
      expect(contrasted).toBeGreaterThan(0);
    } finally {
      await session.close();
    }
  }, 120_000);

  it('a dump of every record is no answer to what one record\'s list says', async () => {
    const seeded = folderWithSeededMemory();
    const session = await connect(memoryTarget('{sandbox}/memory.jsonl'), { policy: new SafetyPolicy({}), sandboxFrom: seeded });
    try {
      const { scenarios } = await generateOfflineScenarios(session, { count: 16, seed: 1 });
      const dump = (await session.callTool('read_graph', {})).text;
      const observations = SEEDED_MEMORY.split('\n').filter(Boolean).flatMap((l) => (JSON.parse(l) as { observations?: string[] }).observations ?? []);
      const asked = scenarios.flatMap((s) => (s.checks ?? []).filter((c) => c.kind === 'answer_value' && observations.includes(c.value)));
      expect(asked.length, scenarios.map((s) => s.task).join('\n')).toBeGreaterThan(0);
      for (const c of asked) expect(c.kind === 'answer_value' && (c.others ?? []).some((o) => answerContains(dump, o)), JSON.stringify(c)).toBe(true);
    } finally {
      await session.close();
    }
  }, 120_000);
});

/**
 * A stdio MCP server that pages every list (two items per page), for pagination tests.
 *
 *   --endless   tools/list always answers with a new nextCursor (a cursor that never ends)
 *   --loop      tools/list answers every page with the same nextCursor (a cursor loop)
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import {
  CallToolRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';

const mode = process.argv.includes('--endless') ? 'endless' : process.argv.includes('--loop') ? 'loop' : 'normal';
export const PAGE_SIZE = 2;

/** Slices `items` at the cursor (the index as a string, prefixed so that it is clearly opaque). */
function page<T>(items: T[], cursor: string | undefined): { items: T[]; nextCursor?: string } {
  const start = cursor ? Number(cursor.replace('page-', '')) : 0;
  const end = start + PAGE_SIZE;
  return { items: items.slice(start, end), nextCursor: end < items.length ? `page-${end}` : undefined };
}

const tools = Array.from({ length: 7 }, (_, i) => ({
  name: `tool_${i}`,
  description: `Paged tool number ${i}.`,
  inputSchema: { type: 'object' as const, properties: {} },
  annotations: { readOnlyHint: true },
}));
const resources = Array.from({ length: 5 }, (_, i) => ({ uri: `paging://resource/${i}`, name: `resource_${i}` }));
const templates = Array.from({ length: 3 }, (_, i) => ({ uriTemplate: `paging://template/${i}/{x}`, name: `template_${i}` }));
const prompts = Array.from({ length: 4 }, (_, i) => ({ name: `prompt_${i}` }));

const server = new Server({ name: 'paging-server', version: '1.0.0' }, { capabilities: { tools: {}, resources: {}, prompts: {} } });
let served = 0;
server.setRequestHandler(ListToolsRequestSchema, async (req) => {
  served++;
  if (mode === 'endless') return { tools: [tools[served % tools.length]], nextCursor: `endless-${served}` };
  if (mode === 'loop') return { tools: [tools[0]], nextCursor: 'same-cursor' };
  const p = page(tools, req.params?.cursor);
  return { tools: p.items, nextCursor: p.nextCursor };
});
server.setRequestHandler(ListResourcesRequestSchema, async (req) => {
  const p = page(resources, req.params?.cursor);
  return { resources: p.items, nextCursor: p.nextCursor };
});
server.setRequestHandler(ListResourceTemplatesRequestSchema, async (req) => {
  const p = page(templates, req.params?.cursor);
  return { resourceTemplates: p.items, nextCursor: p.nextCursor };
});
server.setRequestHandler(ListPromptsRequestSchema, async (req) => {
  const p = page(prompts, req.params?.cursor);
  return { prompts: p.items, nextCursor: p.nextCursor };
});
server.setRequestHandler(CallToolRequestSchema, async (req) => ({
  content: [{ type: 'text', text: `called ${req.params.name}` }],
}));

await server.connect(new StdioServerTransport());
process.stdin.on('end', () => process.exit(0));

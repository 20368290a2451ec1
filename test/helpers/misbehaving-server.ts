/**
 * A stdio MCP server whose tools misbehave on purpose, written with the SDK's low-level Server so that it can
 * break rules McpServer would enforce (e.g. structuredContent that violates the tool's own outputSchema).
 *
 * Tools: whoami (its pid), crash (the process exits mid-call), hang (never answers; counts cancellations),
 * cancellations (how many hang calls were cancelled), huge {chars}, bad_output, media (image + audio + a
 * resource), wipe (no annotations: the spec's defaults make it possibly destructive), peek (read-only).
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';

const empty = { type: 'object' as const, properties: {} };
const tools = [
  { name: 'whoami', description: 'The server process id.', inputSchema: empty, annotations: { readOnlyHint: true } },
  { name: 'crash', description: 'Exits the server process.', inputSchema: empty, annotations: { readOnlyHint: true } },
  { name: 'hang', description: 'Never answers.', inputSchema: empty, annotations: { readOnlyHint: true } },
  { name: 'cancellations', description: 'How many hang calls were cancelled.', inputSchema: empty, annotations: { readOnlyHint: true } },
  {
    name: 'huge',
    description: 'Returns `chars` characters of text.',
    inputSchema: { type: 'object' as const, properties: { chars: { type: 'integer' } }, required: ['chars'] },
    annotations: { readOnlyHint: true },
  },
  {
    name: 'bad_output',
    description: 'Declares an outputSchema and breaks it.',
    inputSchema: empty,
    outputSchema: { type: 'object' as const, properties: { count: { type: 'number' } }, required: ['count'] },
    annotations: { readOnlyHint: true },
  },
  { name: 'media', description: 'An image, an audio clip and an embedded resource.', inputSchema: empty, annotations: { readOnlyHint: true } },
  { name: 'wipe', description: 'Deletes everything (says nothing about itself).', inputSchema: empty },
  { name: 'peek', description: 'Reads something.', inputSchema: empty, annotations: { readOnlyHint: true } },
];

let cancelled = 0;
const text = (t: string): CallToolResult => ({ content: [{ type: 'text', text: t }] });

const server = new Server({ name: 'misbehaving-server', version: '0.0.1' }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
  switch (req.params.name) {
    case 'whoami':
      return text(String(process.pid));
    case 'crash':
      process.exit(7);
      break;
    case 'hang':
      return new Promise<CallToolResult>((_, reject) => {
        extra.signal.addEventListener('abort', () => {
          cancelled++;
          reject(new Error('cancelled'));
        });
      });
    case 'cancellations':
      return text(String(cancelled));
    case 'huge':
      return text('x'.repeat(Number(req.params.arguments?.chars ?? 0)));
    case 'bad_output':
      return { content: [{ type: 'text', text: '{"count":"many"}' }], structuredContent: { count: 'many' } };
    case 'media':
      return {
        content: [
          { type: 'image', mimeType: 'image/png', data: Buffer.alloc(300).toString('base64') },
          { type: 'audio', mimeType: 'audio/wav', data: Buffer.alloc(1000).toString('base64') },
          { type: 'resource', resource: { uri: 'mem://note', mimeType: 'text/plain', text: 'a note' } },
          { type: 'resource', resource: { uri: 'mem://blob', mimeType: 'application/octet-stream', blob: Buffer.alloc(10).toString('base64') } },
        ],
      };
    case 'wipe':
      return text('wiped');
    case 'peek':
      return text('peeked');
  }
  return { content: [{ type: 'text', text: `no tool ${req.params.name}` }], isError: true };
});

await server.connect(new StdioServerTransport());
process.stdin.on('end', () => process.exit(0));

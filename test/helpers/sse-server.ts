/**
 * The bookshop over the older HTTP+SSE transport only (GET /sse opens the stream, POST /messages carries
 * requests), bound to 127.0.0.1. A streamable-HTTP initialize POST to /sse gets 405, which is what makes a
 * client fall back to SSE. Prints `listening on http://127.0.0.1:<port>/sse` to stderr.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { BookshopState, createBookshopServer } from '../../fixtures/server/bookshop.js';

const state = new BookshopState();
const transports = new Map<string, SSEServerTransport>();

const http = createServer((req, res) => {
  void (async () => {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    if (req.method === 'GET' && url.pathname === '/sse') {
      const transport = new SSEServerTransport('/messages', res);
      transports.set(transport.sessionId, transport);
      transport.onclose = () => transports.delete(transport.sessionId);
      await createBookshopServer(state).connect(transport);
      return;
    }
    if (req.method === 'POST' && url.pathname === '/messages') {
      const transport = transports.get(url.searchParams.get('sessionId') ?? '');
      if (!transport) {
        res.writeHead(404).end('unknown session');
        return;
      }
      await transport.handlePostMessage(req, res);
      return;
    }
    res.writeHead(405, { allow: 'GET' }).end('method not allowed');
  })();
});

http.listen(0, '127.0.0.1', () => {
  const { port } = http.address() as AddressInfo;
  process.stderr.write(`listening on http://127.0.0.1:${port}/sse\n`);
});
const shutdown = () => {
  http.closeAllConnections();
  http.close();
  process.exit(0);
};
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);

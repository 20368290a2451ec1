/**
 * The one way mcprl's local HTTP servers (`mcprl serve`, `mcprl backend`, `mcprl mcp --http`, the OAuth redirect
 * listener) start and stop listening: bind, read back the port (0 picks a free one), name the origin (an IPv6 host
 * in brackets), and close — which also ends idle keep-alive and in-flight connections, so that a client holding a
 * connection open cannot keep a stopping server alive.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Listening {
  /** The bound port (the one the system chose when asked for 0). */
  port: number;
  /** `http://host:port`, with an IPv6 host in brackets; no trailing slash. */
  origin: string;
  /** Stops accepting, ends every open connection, and resolves once the server has closed. */
  close(): Promise<void>;
}

/** `http://host:port`, bracketing an IPv6 host. */
export function httpOrigin(host: string, port: number): string {
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/** Binds `server` to host:port; rejects with the server's own error (EADDRINUSE, EACCES…) when it cannot. */
export async function listenHttp(server: Server, port: number, host: string): Promise<Listening> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = (server.address() as AddressInfo).port;
  return { port: bound, origin: httpOrigin(host, bound), close: () => closeHttp(server) };
}

/** Closes a listening server and every connection it still has. */
export function closeHttp(server: Server): Promise<void> {
  return new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

/**
 * Infrastructure failures of the MCP layer. Tool failures are never thrown: they come back as
 * `ToolCallOutcome`s with `isError: true`. What is thrown is what stops the whole conversation with a server.
 */
import { McprlError } from '../util/errors.js';

/** Why a connection to an MCP server could not be made (or remade). */
export type McpConnectErrorCode =
  /** Nothing answered at the URL (connection refused, DNS failure, TLS failure). */
  | 'UNREACHABLE'
  /** The stdio command does not exist or is not executable. */
  | 'COMMAND_NOT_FOUND'
  /** The stdio command could not be started for another reason. */
  | 'SPAWN_FAILED'
  /** The server process exited or closed the connection before initialize completed. */
  | 'SERVER_EXITED'
  /** The server did not complete initialize within the connect timeout. */
  | 'TIMEOUT'
  /** The HTTP server answered with an error status (and the SSE fallback failed too). */
  | 'HTTP_ERROR'
  /** The server answered, but not with valid MCP (bad JSON-RPC, unsupported protocol version, ...). */
  | 'PROTOCOL'
  /** The target itself is invalid: a bad config file, an unknown server name, a malformed URL. */
  | 'CONFIG'
  /** The HTTP server wants an OAuth login that is not stored (or no longer accepted): run `mcprl login <url>`. */
  | 'AUTH_REQUIRED'
  /** `mcprl login` could not complete: the server offers no OAuth, the user or the authorization server refused. */
  | 'AUTH_FAILED'
  /** Another mcprl process held the server's login lock (refreshing its tokens) for longer than mcprl waits. */
  | 'LOGIN_LOCKED';

export class McpConnectError extends McprlError<McpConnectErrorCode> {}

/** Why listing a server's tools/resources/prompts failed after the connection was made. */
export type McpListErrorCode =
  /** The server kept returning new cursors past the page bound. */
  | 'TOO_MANY_PAGES'
  /** The server returned a cursor it had already returned (it would loop forever). */
  | 'CURSOR_LOOP'
  /** The list request itself failed. */
  | 'REQUEST_FAILED';

export class McpListError extends McprlError<McpListErrorCode> {}

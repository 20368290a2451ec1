/**
 * The base of every error mcprl throws on purpose (as openai-node's APIError): a stable `code` that callers
 * and tests branch on, and a message written for people. Subclasses exist only where a caller branches on the
 * class or needs extra fields (an HTTP status, a file); everything else is a McprlError with its own code.
 * Failures of a tool the agent called are not errors at all: they are data in the trajectory.
 */
export class McprlError<C extends string | null = string> extends Error {
  readonly code: C;
  constructor(code: C, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    // The subclass's own name (McpConnectError, …), so stack traces and logs say what failed.
    this.name = new.target.name;
  }
}

/** Text on one line: every run of whitespace (newlines included) becomes one space. */
export function oneLine(s: string): string {
  return s.replace(/\s+/g, ' ').trim();
}

/** An error's message on one line, whatever was thrown. */
export function errorLine(err: unknown): string {
  return oneLine(err instanceof Error ? err.message : String(err));
}

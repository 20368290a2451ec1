import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import type { ToolAnnotations, ToolInfo } from './types.js';

/** The MCP spec's defaults for tool annotations (2025-06-18 and later). */
export const ANNOTATION_DEFAULTS: Readonly<ToolAnnotations> = {
  readOnlyHint: false,
  destructiveHint: true,
  idempotentHint: false,
  openWorldHint: true,
};

/** Converts a tool as listed by the server into a catalog entry with every annotation default filled in. */
export function toToolInfo(tool: Tool): ToolInfo {
  const a = tool.annotations ?? {};
  const annotations: ToolAnnotations = {
    readOnlyHint: a.readOnlyHint ?? ANNOTATION_DEFAULTS.readOnlyHint,
    destructiveHint: a.destructiveHint ?? ANNOTATION_DEFAULTS.destructiveHint,
    idempotentHint: a.idempotentHint ?? ANNOTATION_DEFAULTS.idempotentHint,
    openWorldHint: a.openWorldHint ?? ANNOTATION_DEFAULTS.openWorldHint,
  };
  if (a.title !== undefined) annotations.title = a.title;
  const info: ToolInfo = {
    name: tool.name,
    description: tool.description ?? '',
    inputSchema: tool.inputSchema as Record<string, unknown>,
    annotations,
  };
  const title = tool.title ?? a.title;
  if (title !== undefined) info.title = title;
  if (tool.outputSchema) info.outputSchema = tool.outputSchema as Record<string, unknown>;
  if (tool.execution?.taskSupport) info.taskSupport = tool.execution.taskSupport;
  return info;
}

/**
 * Everything a connected MCP server offers, in one report (what `mcprl inspect` prints and the MCP server's
 * inspect tool returns).
 */
import type { Prompt, Resource, ResourceTemplate } from '@modelcontextprotocol/sdk/types.js';
import type { McpSession, ServerIdentity } from './session.js';
import type { ToolInfo } from './types.js';

export interface InspectReport {
  server: ServerIdentity;
  tools: ToolInfo[];
  resources: Resource[];
  resourceTemplates: ResourceTemplate[];
  prompts: Prompt[];
}

/** Lists everything a connected server offers. */
export async function inspectSession(session: McpSession): Promise<InspectReport> {
  const tools = await session.listTools();
  const resources = await session.listResources();
  const resourceTemplates = await session.listResourceTemplates();
  const prompts = await session.listPrompts();
  return { server: session.server, tools, resources, resourceTemplates, prompts };
}

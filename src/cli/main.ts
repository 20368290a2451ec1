import { Command } from 'commander';
import { registerBackend } from './backend.js';
import { registerEval } from './eval.js';
import { registerExport } from './export.js';
import { registerInspect } from './inspect.js';
import { registerLogin } from './login.js';
import { registerLogout } from './logout.js';
import { registerMcp } from './mcp.js';
import { registerScenarios } from './scenarios.js';
import { registerReport } from './report.js';
import { registerServe } from './serve.js';
import { registerTrain } from './train.js';

/** Builds the `mcprl` command line. Each subcommand lives in its own file in this folder. */
export function buildProgram(): Command {
  const program = new Command();
  program
    .name('mcprl')
    .description("Teach an open LLM to master any MCP server's tools by reinforcement learning.")
    .version('0.1.0');
  registerInspect(program);
  registerScenarios(program);
  registerExport(program);
  registerEval(program);
  registerServe(program);
  registerTrain(program);
  registerReport(program);
  registerMcp(program);
  registerBackend(program);
  registerLogin(program);
  registerLogout(program);
  return program;
}

/** Runs the CLI; exit codes: 0 success, 1 a failure explained on one line of stderr. */
export async function main(argv: string[]): Promise<void> {
  await buildProgram().parseAsync(argv);
}

/**
 * `mcprl scenarios <target> --out DIR`: AutoRL tasks for a server, written as DIR/train.jsonl and DIR/val.jsonl (and
 * DIR/test.jsonl with --test-fraction).
 * With --offline they are verifiable scenarios built from the schemas and read-only tools alone (and, given
 * --generator-model, reworded by that LLM, their checks unchanged); otherwise an OpenAI-compatible LLM writes them.
 */
import { Command, Option } from 'commander';
import { connect, isolatedServerOpener, McpConnectError, McpListError, refusedWrites, type McpSession } from '../mcp/index.js';
import { DEFAULT_GENERATOR_TIMEOUT_MS, ScenarioGenerationError } from '../scenarios/llm.js';
import { writeScenarioSet } from '../scenarios/scenario.js';
import { generateScenarioSet, type ScenarioSetOptions, type ScenarioSummary } from '../scenarios/scenario-set.js';
import { DEFAULT_VAL_FRACTION } from '../scenarios/split.js';
import { formatCoverage, formatInfeasible } from '../scenarios/coverage.js';
import { formatRephrasing } from '../scenarios/rephrase.js';
import { formatQuality, measureQuality } from '../ruler/quality.js';
import { formatNumber, numberParser } from './parse-number.js';
import { addTargetOptions, connectOptionsFromCli, isolationFromCli, targetFromCli, type TargetCliOptions } from './target-options.js';

/** The human-readable summary the command prints. */
export function formatSummary(s: ScenarioSummary, out: string): string {
  const diff = Object.entries(s.byDifficulty).map(([d, n]) => `${d}:${n}`).join(' ');
  const infeasible = formatInfeasible(s.droppedInfeasible);
  const lines = [
    `${s.total} scenarios → ${out}/train.jsonl (${s.train}), ${out}/val.jsonl (${s.val})${s.test > 0 ? `, ${out}/test.jsonl (${s.test})` : ''}`,
    `by difficulty  ${diff}`,
    `by source      llm:${s.bySource.llm} schema:${s.bySource.schema}`,
    `dropped        ${s.droppedDuplicates} duplicates, ${s.droppedUnverifiable} unverifiable${infeasible ? ` (infeasible LLM tasks: ${infeasible})` : ''}, ${s.droppedInvalid} invalid`,
  ];
  if (s.rephrasing) lines.push(`rephrased      ${formatRephrasing(s.rephrasing)}`);
  lines.push(...formatCoverage(s.coverage));
  return lines.join('\n');
}


interface ScenariosCliOptions extends TargetCliOptions {
  out: string;
  offline?: boolean;
  count: number;
  seed: number;
  valFraction: number;
  testFraction: number;
  json?: boolean;
  generatorBaseUrl?: string;
  generatorModel?: string;
  generatorApiKeyEnv: string;
  generatorTimeout?: number;
  instructions?: string;
}

export function registerScenarios(program: Command): Command {
  const cmd = program
    .command('scenarios')
    .description('generate training and validation tasks for an MCP server (AutoRL)')
    .argument('[target...]', 'an http(s) URL, or the server command after --')
    .requiredOption('--out <dir>', 'folder for train.jsonl and val.jsonl')
    .option('--offline', 'no LLM: verifiable scenarios from the tool schemas and read-only tools')
    .option('--count <n>', 'scenarios in total', numberParser({ integer: true, above: 0 }), 24)
    .option('--seed <s>', 'seed for generation and the train/val split', numberParser({ integer: true }), 1)
    .addOption(
      new Option('--val-fraction <f>', 'share of scenarios held out for validation, e.g. 0.25 or 1/3')
        .argParser(numberParser({ min: 0, below: 1, ratios: true }))
        .default(DEFAULT_VAL_FRACTION, formatNumber(DEFAULT_VAL_FRACTION)),
    )
    .addOption(
      new Option('--test-fraction <f>', 'share of scenarios held out as a test set (test.jsonl), never used to select a checkpoint; 0: none')
        .argParser(numberParser({ min: 0, below: 1, ratios: true }))
        .default(0),
    )
    .option('--json', 'print the summary as JSON')
    .option('--generator-base-url <url>', 'OpenAI-compatible endpoint (default: OpenAI, or $OPENAI_BASE_URL)')
    .option('--generator-model <model>', 'model that writes the tasks (required unless --offline); with --offline, it rewords each task, keeping its checks')
    .option('--generator-api-key-env <var>', 'environment variable holding the API key', 'OPENAI_API_KEY')
    .option('--generator-timeout <ms>', `timeout of one generator request (default ${DEFAULT_GENERATOR_TIMEOUT_MS}; retried twice, Retry-After honoured)`, numberParser({ integer: true, above: 0, unit: 'milliseconds' }))
    .option('--instructions <text>', 'extra guidance for the LLM about the tasks you want');
  addTargetOptions(cmd);
  cmd.addHelpText(
    'after',
    `
Examples:
  mcprl scenarios --offline --out runs/shop/scenarios --count 40 -- node --import tsx fixtures/server/main.ts
  mcprl scenarios http://127.0.0.1:3001/mcp --out scen --generator-model gpt-4.1-mini
  mcprl scenarios --offline --generator-model gpt-4.1-mini --out scen -- node --import tsx fixtures/server/main.ts
  mcprl scenarios --out scen --generator-base-url http://localhost:8000/v1 --generator-model qwen3 \\
      --generator-api-key-env VLLM_KEY -- npx @modelcontextprotocol/server-everything`,
  );
  cmd.action(async (targetArgs: string[], opts: ScenariosCliOptions) => {
    let session: McpSession | undefined;
    try {
      const target = targetFromCli(targetArgs, opts);
      if (opts.valFraction + opts.testFraction >= 1) {
        throw new ScenarioGenerationError(`--val-fraction ${formatNumber(opts.valFraction)} and --test-fraction ${formatNumber(opts.testFraction)} leave nothing to train on: their sum must be below 1`);
      }
      let generator: ScenarioSetOptions['generator'];
      if (!opts.offline && !opts.generatorModel) throw new ScenarioGenerationError('--generator-model is required unless --offline is given');
      // With --offline the model (when given) rewords the tasks it made; without, it writes them.
      if (opts.generatorModel) {
        const apiKey = process.env[opts.generatorApiKeyEnv];
        // Local endpoints (vLLM, llama.cpp) often need no key; OpenAI itself always does.
        if (!apiKey && !opts.generatorBaseUrl) {
          throw new ScenarioGenerationError(`no API key: set ${opts.generatorApiKeyEnv} (or name another variable with --generator-api-key-env)`);
        }
        generator = { baseURL: opts.generatorBaseUrl, model: opts.generatorModel, apiKey: apiKey || 'no-key', timeoutMs: opts.generatorTimeout };
      }
      const isolation = isolationFromCli(opts);
      const connectOptions = connectOptionsFromCli(opts);
      session = await connect(target, connectOptions);
      // Write tasks are made and replayed only where each replay's state is its own; the rest are refused, in one line.
      const refused = await refusedWrites(target, isolation, connectOptions, await session.listTools());
      if (refused) process.stderr.write(`mcprl scenarios: ${refused}\n`);
      const isolatedServer = isolatedServerOpener(target, isolation, connectOptions);
      const { train, val, test, summary } = await generateScenarioSet(session, {
        count: opts.count,
        seed: opts.seed,
        valFraction: opts.valFraction,
        testFraction: opts.testFraction,
        offline: opts.offline,
        generator,
        instructions: opts.instructions,
        // With --isolate on a {sandbox} (or --state-in-memory), tools that write get tasks too, each replayed on a server of its own.
        ...(isolatedServer ? { isolatedServer } : {}),
      });
      if (summary.total === 0) throw new ScenarioGenerationError('no scenarios could be generated for this server');
      await writeScenarioSet(opts.out, train, val, test);
      // Whether the tasks test what they should: read-only calls of an oracle and of a random agent on the server.
      const quality = await measureQuality(session, [...train, ...val, ...test], { seed: opts.seed });
      process.stdout.write(opts.json ? `${JSON.stringify({ out: opts.out, ...summary, quality }, null, 2)}\n` : `${[formatSummary(summary, opts.out), ...formatQuality(quality)].join('\n')}\n`);
      if (summary.rephrasing?.failed) {
        process.stderr.write(`mcprl scenarios: rewording stopped (${summary.rephrasing.failed}); the tasks not reworded keep their generated wording\n`);
      }
      if (summary.total < opts.count) {
        process.stderr.write(`mcprl scenarios: only ${summary.total} of ${opts.count} scenarios could be generated for this server\n`);
      }
    } catch (err) {
      const code = err instanceof McpConnectError || err instanceof McpListError || err instanceof ScenarioGenerationError ? `${err.code}: ` : '';
      const msg = (err instanceof Error ? err.message : String(err)).replace(/\s+/g, ' ').trim();
      process.stderr.write(`mcprl scenarios: ${code}${msg}\n`);
      process.exitCode = 1;
    } finally {
      await session?.close();
    }
  });
  return cmd;
}

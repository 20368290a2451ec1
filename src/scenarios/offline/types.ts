/** The shapes offline generation takes and gives, and those its stages hand each other. */
import type { CallSetting, CallToolOptions, PolicyDecision, ToolCallOutcome, ToolInfo } from '../../mcp/index.js';
import type { ToolCoverage } from '../coverage.js';
import type { Check, Scenario } from '../scenario.js';

/** What scenario generation needs from a server connection; an McpSession satisfies it. */
export interface ScenarioServer {
  listTools(): Promise<ToolInfo[]>;
  callTool(name: string, args: Record<string, unknown>, opts?: CallToolOptions): Promise<ToolCallOutcome>;
  /** The session's safety policy, so that the coverage report can say which tools it refuses. */
  readonly policy?: { check(tool: ToolInfo, where?: CallSetting): PolicyDecision };
  /** The server's `{sandbox}` directory, when it has one: scenarios speak of it as `{sandbox}`. */
  readonly sandboxDir?: string;
}

export interface OfflineOptions {
  /** How many scenarios to produce (fewer if the server does not offer enough). Default 24. */
  count?: number;
  /** Seed for every random choice. Default 1. */
  seed?: number;
  /** Keep only this bucket of entity keys and phrasing templates (see the module comment). */
  partition?: { index: number; of: number };
  /** Reject scenarios whose checked arguments use one of `entities`, or whose task near-duplicates one of `tasks`. */
  exclude?: { entities?: Iterable<string>; tasks?: Iterable<string> };
  /** Candidate scenarios to try before stopping. Default (10 · count + 50) · partition.of. */
  maxAttempts?: number;
  /** Timeout of one tool call in ms. Default 10000. A tool that times out is not used again. */
  callTimeoutMs?: number;
  /** Near-duplicate threshold (see dedup.ts). Default 0.8. */
  duplicateThreshold?: number;
  /**
   * Opens a fresh, isolated server (a new process with its own `{sandbox}`). Given, tools that write get tasks too:
   * each is replayed by a scripted solver on a server of its own, and checked by the state a read-only tool shows
   * afterwards. The servers are closed (and their sandboxes removed) at once. Default: write tools get no tasks.
   */
  isolatedServer?: () => Promise<ScenarioServer & { close(): Promise<void> }>;
}

export interface OfflineResult {
  scenarios: Scenario[];
  /** Candidates dropped as duplicates (same checks, or near-duplicate task text). */
  droppedDuplicates: number;
  /** Candidates dropped because a call failed or the replay did not reproduce the expected values. */
  droppedUnverifiable: number;
  /** Candidates outside the requested partition or hitting `exclude`. */
  droppedExcluded: number;
  attempts: number;
  /** Tools used for generation (read-only ones). */
  readOnlyTools: string[];
  /** Per tool of the server: scenarios made, and for a tool with none, why. */
  coverage: ToolCoverage[];
  /**
   * What discovery found that names a thing on the server (ids, names, labels, paths, uris…), each with the
   * read-only tool whose result showed it first, in the order found. `count: 0` runs discovery alone.
   */
  entities: DiscoveredEntity[];
}

/** A value that names a thing on the server, with the read-only tool whose result showed it. */
export interface DiscoveredEntity {
  /** The key it was found under ("id", "book_id", "name", "path"). */
  key: string;
  value: Scalar;
  tool: string;
}

export type Scalar = string | number | boolean;

/** A record harvested from a result: an object with at least two scalar fields. */
export interface EntityRecord {
  /** What the record is, singular ("book", "author"). */
  noun: string;
  fields: Record<string, Scalar>;
  /** Its short lists of strings (server-memory's observations): what can name it without its label. */
  lists?: Record<string, string[]>;
}

/** A task a shape drew, before the filters and the replay. */
export interface Candidate {
  task: string;
  difficulty: number;
  checks: Check[];
  /** Already replayed on isolated servers (write tasks): the read-only replay is not for it. */
  verified?: boolean;
  /** Each value the task states → the words that say it (what find → act may replace by a clue). */
  mentions?: Record<string, string>;
}

/** What a task shape draws: a candidate, a draw whose calls failed (counted as unverifiable), or nothing. */
export type Drawn = Candidate | 'unverifiable' | undefined;

/**
 * The trained agent, in process: a base model with (optionally) a LoRA adapter from a run or a folder, loaded
 * into the engine once and kept while calls keep asking for the same pair.
 */
import { existsSync } from 'node:fs';
import type { McpTrajectory } from '../agent/trajectory.js';
import { ChatEngine } from '../chat/chat-engine.js';
import { EnginePolicy } from '../agent/engine-policy.js';
import type { Device } from '../engine/device.js';
import { RunDir } from '../train/run-dir.js';
import { Workspace } from './workspace.js';
import type { RolloutSettings } from '../agent/rollout-settings.js';
import { McprlError } from '../util/errors.js';

/** Which weights answer: a run's best (or latest) checkpoint, or a model folder plus an optional adapter folder. */
export interface AgentSource {
  run?: string;
  checkpoint?: 'best' | 'latest';
  model?: string;
  adapter?: string;
  /** Chat template variables, over the run's own (those it trained with). */
  chat_template_kwargs?: Record<string, unknown>;
}

export interface ResolvedAgent {
  modelDir: string;
  adapterDir: string | null;
  /** How the agent is described in results (workspace-relative paths). */
  label: string;
  /** The run's config when the agent comes from a run (max turns and tokens are taken from it). */
  runConfig?: Partial<Pick<RolloutSettings, 'maxTurns' | 'maxTokens'>>;
  /**
   * Chat template variables every turn is rendered with: the run's (so the agent is asked the way it was trained,
   * e.g. Qwen3 with `enable_thinking: false`), overridden key by key by the call's. Absent when neither gives any.
   */
  chatTemplateKwargs?: Record<string, unknown>;
}

/** Resolves an AgentSource to folders, every one confined to the workspace or a model root. */
export async function resolveAgent(ws: Workspace, src: AgentSource): Promise<ResolvedAgent> {
  if (src.run !== undefined) {
    if (src.model !== undefined || src.adapter !== undefined) throw new McprlError('WORKSPACE', 'give either run, or model (and adapter), not both');
    const run = new RunDir(ws.runDir(src.run));
    if (!run.exists()) throw new McprlError('WORKSPACE', `no run named ${JSON.stringify(src.run)} in the workspace`);
    const state = await run.readState();
    if (!state) throw new McprlError('WORKSPACE', `run ${src.run} has not completed its first evaluation yet; wait for training_status to show step 0`);
    const config = await run.readConfig<{ model: string; maxTurns?: number; maxTokens?: number; chatTemplateKwargs?: Record<string, unknown> }>();
    const modelDir = ws.resolveModel(config.model, `the base model of run ${src.run}`);
    const which = src.checkpoint ?? 'best';
    const step = which === 'best' ? state.bestStep : state.step;
    let adapterDir: string | null = null;
    if (step > 0) {
      const best = run.path('adapter');
      adapterDir = which === 'best' && existsSync(`${best}/adapter_config.json`) ? best : run.checkpoint(step);
      if (!existsSync(`${adapterDir}/adapter_config.json`)) throw new McprlError('WORKSPACE', `run ${src.run}: the checkpoint of step ${step} is missing`);
    }
    const label = adapterDir ? `${src.run} (${which} checkpoint, step ${step})` : `${src.run} (step 0: no trained step beat the base model, so the base model answers)`;
    const kwargs = { ...config.chatTemplateKwargs, ...src.chat_template_kwargs };
    return { modelDir, adapterDir, label, runConfig: config, ...(Object.keys(kwargs).length > 0 ? { chatTemplateKwargs: kwargs } : {}) };
  }
  if (src.model === undefined) throw new McprlError('WORKSPACE', 'give run, or model (a Hugging Face folder) with an optional adapter');
  const modelDir = ws.resolveModel(src.model, 'model');
  if (!existsSync(`${modelDir}/config.json`)) throw new McprlError('WORKSPACE', `model ${JSON.stringify(src.model)} is not a Hugging Face model folder (no config.json)`);
  const adapterDir = src.adapter !== undefined ? ws.resolve(src.adapter, 'adapter') : null;
  if (adapterDir && !existsSync(`${adapterDir}/adapter_config.json`)) throw new McprlError('WORKSPACE', `adapter ${JSON.stringify(src.adapter)} is not a PEFT adapter folder (no adapter_config.json)`);
  return {
    modelDir, adapterDir, label: adapterDir ? `${ws.display(modelDir)} + ${ws.display(adapterDir)}` : ws.display(modelDir),
    ...(src.chat_template_kwargs ? { chatTemplateKwargs: src.chat_template_kwargs } : {}),
  };
}

interface Loaded {
  key: string;
  engine: ChatEngine;
  users: number;
  evicted: boolean;
}

/** One loaded engine at a time; a call that needs other weights replaces it once nobody uses the old one. */
export class AgentEngines {
  /** device: where the agents' engines run (src/engine/device.ts); default auto. */
  constructor(private readonly device?: Device) {}

  private current: Loaded | undefined;
  private loading: Promise<Loaded> | undefined;

  /** Runs `fn` with a policy for `agent`, loading the weights if needed. */
  async with<T>(agent: ResolvedAgent, opts: { maxTokens?: number; temperature?: number }, fn: (policy: EnginePolicy) => Promise<T>): Promise<T> {
    const loaded = await this.acquire(agent);
    try {
      const policy = new EnginePolicy(loaded.engine, {
        model: agent.adapterDir ? 'agent' : loaded.engine.modelName,
        maxTokens: opts.maxTokens,
        temperature: opts.temperature,
        ...(agent.chatTemplateKwargs ? { chatTemplateKwargs: agent.chatTemplateKwargs } : {}),
      });
      return await fn(policy);
    } finally {
      this.release(loaded);
    }
  }

  private async acquire(agent: ResolvedAgent): Promise<Loaded> {
    const key = `${agent.modelDir}\0${agent.adapterDir ?? ''}`;
    for (;;) {
      if (this.current?.key === key) {
        this.current.users++;
        return this.current;
      }
      if (this.loading) {
        await this.loading.catch(() => undefined);
        continue;
      }
      this.loading = (async () => {
        const engine = await ChatEngine.load(agent.modelDir, {
          ...(agent.adapterDir ? { adapters: [{ name: 'agent', dir: agent.adapterDir }] } : {}),
          ...(this.device !== undefined ? { device: this.device } : {}),
        });
        const old = this.current;
        this.current = { key, engine, users: 0, evicted: false };
        if (old) {
          old.evicted = true;
          if (old.users === 0) old.engine.close();
        }
        return this.current;
      })().finally(() => {
        this.loading = undefined;
      });
      await this.loading;
    }
  }

  private release(l: Loaded): void {
    l.users--;
    if (l.evicted && l.users === 0) l.engine.close();
  }

  close(): void {
    if (this.current && this.current.users === 0) this.current.engine.close();
    this.current = undefined;
  }
}

export interface TraceEntry {
  kind: 'assistant' | 'tool_call' | 'tool_result';
  name?: string;
  text: string;
}

const clip = (s: string, n: number) => (s.length <= n ? s : `${s.slice(0, n - 1)}…`);

/** A compact, readable trace of a trajectory: the assistant's words, each call and each result, clipped. */
export function compactTrace(t: McpTrajectory, maxChars = 400): TraceEntry[] {
  const out: TraceEntry[] = [];
  const names = new Map<string, string>();
  for (const m of t.messages) {
    if (m.role === 'assistant') {
      if (m.content && m.content.trim()) out.push({ kind: 'assistant', text: clip(m.content.trim(), maxChars) });
      for (const c of m.tool_calls ?? []) {
        if (c.id !== undefined) names.set(c.id, c.function.name);
        out.push({ kind: 'tool_call', name: c.function.name, text: clip(c.function.arguments, maxChars) });
      }
    } else if (m.role === 'tool') {
      const name = (m.tool_call_id && names.get(m.tool_call_id)) ?? m.name;
      out.push({ kind: 'tool_result', ...(name ? { name } : {}), text: clip(m.content ?? '', maxChars) });
    }
  }
  return out;
}

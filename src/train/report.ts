/**
 * The run report: one self-contained HTML file (inline SVG and CSS, no scripts, no network) with the learning
 * curves, success by tool and difficulty on the validation and test sets, the configuration and a few
 * trajectories before and after training side by side.
 */
import type { BreakdownRow } from './breakdown.js';

export interface ReportTrajectory {
  scenario_id: string;
  task?: string;
  reward: number;
  messages: { role: string; content: string | null; tool_calls?: { function: { name: string; arguments: string } }[] }[];
}

export interface ReportInput {
  runName: string;
  config: Record<string, unknown>;
  metrics: Record<string, unknown>[];
  /** Validation trajectories of the untrained model (step 0). */
  before: ReportTrajectory[];
  /** Validation trajectories of the best checkpoint. */
  after: ReportTrajectory[];
  /** Free-form summary lines shown at the top (e.g. best step, export path). */
  summary?: string[];
  /** Success by tool and difficulty, one table per held-out set (see breakdown.ts). */
  breakdowns?: { title: string; columns: string[]; rows: BreakdownRow[] }[];
}

/** The curves drawn; an `optional` one only when the run has its metric (rollout servers, asynchronous rollouts). */
const CURVES: { key: string; title: string; unit?: string; optional?: boolean }[] = [
  { key: 'train_reward', title: 'Train reward (mean)' },
  { key: 'val_success', title: 'Validation success', unit: 'fraction' },
  { key: 'groups_dropped_zero_variance', title: 'Groups dropped (all attempts scored alike)' },
  { key: 'tool_call_validity', title: 'Tool-call validity', unit: 'fraction' },
  { key: 'loss', title: 'Loss' },
  { key: 'kl', title: 'KL to the base model' },
  { key: 'logprob_mismatch', title: 'Sampler vs trainer |Δ logprob| (mean)', optional: true },
  { key: 'tis_truncated', title: 'Tokens at the TIS cap', unit: 'fraction', optional: true },
  { key: 'staleness_mean', title: 'Rollout staleness (mean, in steps)', optional: true },
  { key: 'groups_too_stale', title: 'Groups regathered as too stale', optional: true },
];

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

function fmt(x: number): string {
  if (x === 0) return '0';
  const a = Math.abs(x);
  return a >= 100 || a < 0.01 ? x.toExponential(2) : x.toFixed(3);
}

/** A line chart of (step, value) points as an inline SVG. */
export function lineChart(title: string, points: [number, number][], width = 360, height = 200): string {
  const pad = { l: 52, r: 12, t: 24, b: 30 };
  const head = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" role="img" aria-label="${escapeHtml(title)}">` +
    `<text x="${width / 2}" y="16" text-anchor="middle" font-size="13" font-weight="600">${escapeHtml(title)}</text>`;
  if (points.length === 0) return `${head}<text x="${width / 2}" y="${height / 2}" text-anchor="middle" font-size="12" fill="#888">no data</text></svg>`;
  const xs = points.map((p) => p[0]);
  const ys = points.map((p) => p[1]);
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const sx = (x: number) => pad.l + ((x - x0) / (x1 - x0)) * (width - pad.l - pad.r);
  const sy = (y: number) => height - pad.b - ((y - y0) / (y1 - y0)) * (height - pad.t - pad.b);
  const path = points.map((p, i) => `${i ? 'L' : 'M'}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(' ');
  const dots = points.map((p) => `<circle cx="${sx(p[0]).toFixed(1)}" cy="${sy(p[1]).toFixed(1)}" r="2.5" fill="#2563eb"><title>step ${p[0]}: ${fmt(p[1])}</title></circle>`).join('');
  const axes = `<line x1="${pad.l}" y1="${height - pad.b}" x2="${width - pad.r}" y2="${height - pad.b}" stroke="#999"/>` +
    `<line x1="${pad.l}" y1="${pad.t}" x2="${pad.l}" y2="${height - pad.b}" stroke="#999"/>` +
    `<text x="${pad.l - 4}" y="${sy(y1) + 4}" text-anchor="end" font-size="10">${fmt(y1)}</text>` +
    `<text x="${pad.l - 4}" y="${sy(y0) + 4}" text-anchor="end" font-size="10">${fmt(y0)}</text>` +
    `<text x="${sx(x0)}" y="${height - pad.b + 14}" text-anchor="middle" font-size="10">${x0}</text>` +
    `<text x="${sx(x1)}" y="${height - pad.b + 14}" text-anchor="middle" font-size="10">${x1}</text>` +
    `<text x="${(pad.l + width - pad.r) / 2}" y="${height - 4}" text-anchor="middle" font-size="10" fill="#555">step</text>`;
  return `${head}${axes}<path d="${path}" fill="none" stroke="#2563eb" stroke-width="1.5"/>${dots}</svg>`;
}

function renderTrajectory(t: ReportTrajectory | undefined): string {
  if (!t) return '<div class="traj empty">—</div>';
  const turns = t.messages
    .filter((m) => m.role !== 'system')
    .map((m) => {
      const calls = (m.tool_calls ?? []).map((c) => `<div class="call">→ ${escapeHtml(c.function.name)}(${escapeHtml(c.function.arguments)})</div>`).join('');
      const text = m.content ? `<div class="text">${escapeHtml(m.content.length > 1200 ? m.content.slice(0, 1200) + ' …' : m.content)}</div>` : '';
      return `<div class="msg ${escapeHtml(m.role)}"><span class="role">${escapeHtml(m.role)}</span>${text}${calls}</div>`;
    })
    .join('');
  return `<div class="traj"><div class="reward">reward ${fmt(t.reward)}</div>${turns}</div>`;
}

function renderBreakdown(b: NonNullable<ReportInput['breakdowns']>[number]): string {
  const cell = (x: number | null) => (x === null ? '–' : `${(x * 100).toFixed(1)}%`);
  const head = `<tr><th>${b.rows[0]?.by === 'difficulty' ? 'difficulty' : 'tools checked'}</th><th>scenarios</th>${b.columns.map((c) => `<th>${escapeHtml(c)}</th>`).join('')}</tr>`;
  const body = b.rows.map((r, i) => {
    const sep = i > 0 && b.rows[i - 1].by !== r.by ? `<tr><th>difficulty</th><th></th>${b.columns.map(() => '<th></th>').join('')}</tr>` : '';
    return `${sep}<tr><td>${escapeHtml(r.key)}</td><td>${r.scenarios}</td>${r.success.map((x) => `<td>${cell(x)}</td>`).join('')}</tr>`;
  }).join('');
  return `<h3>${escapeHtml(b.title)}</h3><table class="breakdown">${head}${body}</table>`;
}

export function renderReport(input: ReportInput): string {
  const charts = CURVES.map(({ key, title, optional }) => {
    const pts = input.metrics
      .filter((m) => typeof m[key] === 'number' && typeof m.step === 'number')
      .map((m) => [m.step as number, m[key] as number] as [number, number]);
    return optional && pts.length === 0 ? '' : lineChart(title, pts);
  }).filter(Boolean).join('\n');
  const afterById = new Map(input.after.map((t) => [t.scenario_id, t]));
  const pairs = input.before.filter((t) => afterById.has(t.scenario_id)).slice(0, 6);
  const side = pairs.map((b) => `<tr><td colspan="2" class="task">${escapeHtml(b.task ?? b.scenario_id)}</td></tr>` +
    `<tr><td>${renderTrajectory(b)}</td><td>${renderTrajectory(afterById.get(b.scenario_id))}</td></tr>`).join('\n');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mcprl run ${escapeHtml(input.runName)}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#111;max-width:1200px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.charts{display:flex;flex-wrap:wrap;gap:12px}.charts svg{border:1px solid #e5e7eb;border-radius:6px;background:#fff}
pre{background:#f6f8fa;padding:12px;border-radius:6px;overflow:auto;font-size:12px}
table{border-collapse:collapse;width:100%}td{vertical-align:top;padding:6px;border-top:1px solid #e5e7eb;width:50%}
td.task{font-weight:600;background:#f9fafb}
table.breakdown{width:auto}table.breakdown td,table.breakdown th{width:auto;padding:3px 12px;text-align:left}h3{font-size:14px}.traj{font-size:12px}.reward{font-weight:600;margin-bottom:4px}
.msg{margin:3px 0;padding:4px 6px;border-radius:4px;background:#f3f4f6;white-space:pre-wrap;word-break:break-word}
.msg.assistant{background:#eef2ff}.msg.tool{background:#ecfdf5}.role{font-weight:600;margin-right:6px;color:#555}
.call{font-family:ui-monospace,monospace;color:#1d4ed8}
</style></head><body>
<h1>mcprl run <code>${escapeHtml(input.runName)}</code></h1>
${(input.summary ?? []).map((s) => `<p>${escapeHtml(s)}</p>`).join('\n')}
<h2>Curves</h2><div class="charts">${charts}</div>
${input.breakdowns?.length ? `<h2>Success by tool and difficulty</h2>\n${input.breakdowns.map(renderBreakdown).join('\n')}` : ''}
<h2>Before and after training (validation)</h2>
<table><tr><th>untrained (step 0)</th><th>best checkpoint</th></tr>${side || '<tr><td colspan="2">no trajectories recorded</td></tr>'}</table>
<h2>Configuration</h2><pre>${escapeHtml(JSON.stringify(input.config, null, 2))}</pre>
</body></html>
`;
}

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
  /** The checkpoint validation selected (state.json's bestStep), marked on the validation curve. */
  selectedStep?: number;
  /** Success by tool and difficulty, one table per held-out set (see breakdown.ts). */
  breakdowns?: { title: string; columns: string[]; rows: BreakdownRow[] }[];
}

/**
 * The curves drawn, with what their y axis counts; an `optional` one only when the run has its metric (rollout
 * servers, asynchronous rollouts). A `fraction` is drawn from 0 to 100 %.
 */
const CURVES: { key: string; title: string; axis: string; fraction?: boolean; optional?: boolean }[] = [
  { key: 'train_reward', title: 'Train reward (mean)', axis: 'reward' },
  { key: 'val_success', title: 'Validation success', axis: 'success', fraction: true },
  { key: 'groups_dropped_zero_variance', title: 'Groups dropped (all attempts scored alike)', axis: 'groups' },
  { key: 'tool_call_validity', title: 'Tool-call validity', axis: 'valid calls', fraction: true },
  { key: 'loss', title: 'Loss', axis: 'loss' },
  { key: 'kl', title: 'KL to the base model', axis: 'KL' },
  { key: 'logprob_mismatch', title: 'Sampler vs trainer |Δ logprob| (mean)', axis: '|Δ logprob|', optional: true },
  { key: 'tis_truncated', title: 'Tokens at the TIS cap', axis: 'tokens', fraction: true, optional: true },
  { key: 'staleness_mean', title: 'Rollout staleness (mean, in steps)', axis: 'steps', optional: true },
  { key: 'groups_too_stale', title: 'Groups regathered as too stale', axis: 'groups', optional: true },
];

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

function fmt(x: number): string {
  if (x === 0) return '0';
  const a = Math.abs(x);
  return a >= 100 || a < 0.01 ? x.toExponential(2) : x.toFixed(3);
}

/** One line of a chart: (step, value) points. */
export interface ChartSeries {
  name: string;
  points: [number, number][];
  color: string;
  /** Drawn dashed (a series measured only at a few steps, such as test success). */
  dashed?: boolean;
}

export interface ChartOptions {
  /** What the y axis counts, written along it. */
  axis?: string;
  /** Values are fractions: the y axis runs from 0 to 100 %. */
  fraction?: boolean;
  /** A step to mark with a vertical line and its label (the checkpoint validation selected). */
  marker?: { step: number; label: string };
  width?: number;
  height?: number;
}

/**
 * About `count` evenly spaced round values (1, 2 or 5 times a power of ten) that cover [lo, hi]; `minStep` bounds
 * the spacing from below (1 for steps, which are whole numbers).
 */
export function niceTicks(lo: number, hi: number, count = 5, minStep = 0): number[] {
  if (!(hi > lo)) return [lo];
  const raw = Math.max((hi - lo) / count, minStep);
  const pow = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * pow).find((s) => s >= raw * (1 - 1e-9))!;
  const first = Math.floor(lo / step + 1e-9) * step;
  const ticks: number[] = [];
  for (let t = first; t < hi + step * (1 - 1e-9); t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

/** A tick's label: as many decimals as the spacing needs, or powers of ten where that would be long. */
function tickLabel(x: number, spacing: number, fraction: boolean): string {
  if (fraction) return `${Number((x * 100).toFixed(Math.max(0, -Math.floor(Math.log10(spacing * 100)))))}%`;
  const decimals = Math.max(0, -Math.floor(Math.log10(spacing)));
  if (x !== 0 && (decimals > 4 || Math.abs(x) >= 1e5)) return x.toExponential(1);
  return x.toFixed(decimals);
}

/**
 * A line chart as an inline SVG: each series a line with a point per step, both axes with round ticks and what
 * they count, a legend when there is more than one series, and the marked step as a dashed vertical line.
 */
export function lineChart(title: string, series: ChartSeries[], o: ChartOptions = {}): string {
  const width = o.width ?? 400;
  const height = o.height ?? 230;
  const pad = { l: 62, r: 14, t: 28, b: 40 };
  const head = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" role="img" aria-label="${escapeHtml(title)}">` +
    `<text x="${width / 2}" y="16" text-anchor="middle" font-size="13" font-weight="600">${escapeHtml(title)}</text>`;
  const drawn = series.filter((s) => s.points.length > 0);
  if (drawn.length === 0) return `${head}<text x="${width / 2}" y="${height / 2}" text-anchor="middle" font-size="12" fill="#888">no data</text></svg>`;
  const xs = [...drawn.flatMap((s) => s.points.map((p) => p[0])), ...(o.marker ? [o.marker.step] : [])];
  const ys = drawn.flatMap((s) => s.points.map((p) => p[1]));
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = o.fraction ? [0, 1] : [Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const xTicks = niceTicks(x0, x1, 6, 1).filter((t) => t >= x0 && t <= x1);
  const yTicks = niceTicks(y0, y1, 5);
  // The y axis runs from tick to tick, so its ends are labelled; the x axis from the first step to the last.
  [y0, y1] = [Math.min(y0, yTicks[0]), Math.max(y1, yTicks[yTicks.length - 1])];
  const sx = (x: number) => (pad.l + ((x - x0) / (x1 - x0)) * (width - pad.l - pad.r)).toFixed(1);
  const sy = (y: number) => (height - pad.b - ((y - y0) / (y1 - y0)) * (height - pad.t - pad.b)).toFixed(1);
  const bottom = height - pad.b;
  const ySpacing = yTicks.length > 1 ? yTicks[1] - yTicks[0] : 1;
  const xSpacing = xTicks.length > 1 ? xTicks[1] - xTicks[0] : 1;
  const axes = `<line x1="${pad.l}" y1="${bottom}" x2="${width - pad.r}" y2="${bottom}" stroke="#999"/>` +
    `<line x1="${pad.l}" y1="${pad.t}" x2="${pad.l}" y2="${bottom}" stroke="#999"/>` +
    `<g class="x-ticks" font-size="10" text-anchor="middle">${xTicks.map((t) =>
      `<g class="tick"><line x1="${sx(t)}" y1="${bottom}" x2="${sx(t)}" y2="${bottom + 4}" stroke="#999"/><text x="${sx(t)}" y="${bottom + 15}">${tickLabel(t, xSpacing, false)}</text></g>`).join('')}</g>` +
    `<g class="y-ticks" font-size="10" text-anchor="end">${yTicks.map((t) =>
      `<g class="tick"><line x1="${pad.l - 4}" y1="${sy(t)}" x2="${width - pad.r}" y2="${sy(t)}" stroke="#eee"/><text x="${pad.l - 6}" y="${Number(sy(t)) + 3.5}">${tickLabel(t, ySpacing, !!o.fraction)}</text></g>`).join('')}</g>` +
    `<text class="x-label" x="${(pad.l + width - pad.r) / 2}" y="${height - 6}" text-anchor="middle" font-size="11" fill="#555">step</text>` +
    (o.axis ? `<text class="y-label" transform="translate(13 ${(pad.t + bottom) / 2}) rotate(-90)" text-anchor="middle" font-size="11" fill="#555">${escapeHtml(o.axis)}${o.fraction ? ' (%)' : ''}</text>` : '');
  const marker = o.marker
    ? `<g class="selected-step"><line x1="${sx(o.marker.step)}" y1="${pad.t}" x2="${sx(o.marker.step)}" y2="${bottom}" stroke="#16a34a" stroke-width="1.5" stroke-dasharray="4 3"/>` +
      `<text x="${sx(o.marker.step)}" y="${pad.t - 2}" text-anchor="${o.marker.step > (x0 + x1) / 2 ? 'end' : 'start'}" font-size="10" fill="#16a34a">${escapeHtml(o.marker.label)}</text></g>`
    : '';
  const lines = drawn.map((s) => {
    const pts = [...s.points].sort((a, b) => a[0] - b[0]);
    const path = pts.map((p, i) => `${i ? 'L' : 'M'}${sx(p[0])},${sy(p[1])}`).join(' ');
    const value = (y: number) => (o.fraction ? `${(y * 100).toFixed(1)}%` : fmt(y));
    const dots = pts.map((p) => `<circle cx="${sx(p[0])}" cy="${sy(p[1])}" r="2.5" fill="${s.color}"><title>${escapeHtml(s.name)}, step ${p[0]}: ${value(p[1])}</title></circle>`).join('');
    return `<g class="series" data-name="${escapeHtml(s.name)}"><path d="${path}" fill="none" stroke="${s.color}" stroke-width="1.5"${s.dashed ? ' stroke-dasharray="5 3"' : ''}/>${dots}</g>`;
  }).join('');
  const legend = drawn.length > 1
    ? `<g class="legend" font-size="10">${drawn.map((s, i) => {
      const y = pad.t + 8 + i * 13;
      return `<line x1="${pad.l + 8}" y1="${y}" x2="${pad.l + 22}" y2="${y}" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="5 3"' : ''}/><text x="${pad.l + 26}" y="${y + 3.5}">${escapeHtml(s.name)}</text>`;
    }).join('')}</g>`
    : '';
  return `${head}${axes}${marker}${lines}${legend}</svg>`;
}

/**
 * Test success as measured: the untrained model (step 0), the last step, and the selected checkpoint at its own
 * step (the last step's row holds it as test_success_best, with best_step).
 */
export function testPoints(metrics: Record<string, unknown>[]): [number, number][] {
  const byStep = new Map<number, number>();
  for (const m of metrics) {
    if (typeof m.step === 'number' && typeof m.test_success === 'number') byStep.set(m.step, m.test_success);
  }
  for (const m of metrics) {
    if (typeof m.best_step === 'number' && typeof m.test_success_best === 'number' && !byStep.has(m.best_step)) byStep.set(m.best_step, m.test_success_best);
  }
  return [...byStep].sort((a, b) => a[0] - b[0]);
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

const BLUE = '#2563eb';
const ORANGE = '#ea580c';

export function renderReport(input: ReportInput): string {
  const charts = CURVES.map(({ key, title, axis, fraction, optional }) => {
    const pts = input.metrics
      .filter((m) => typeof m[key] === 'number' && typeof m.step === 'number')
      .map((m) => [m.step as number, m[key] as number] as [number, number]);
    if (optional && pts.length === 0) return '';
    if (key !== 'val_success') return lineChart(title, [{ name: key, points: pts, color: BLUE }], { axis, fraction });
    // Validation picks the checkpoint; test, measured beside it, says how much that choice flatters it.
    const test = testPoints(input.metrics);
    const selected = input.selectedStep;
    return lineChart(test.length > 0 ? 'Validation and test success' : title, [
      { name: 'validation', points: pts, color: BLUE },
      { name: 'test', points: test, color: ORANGE, dashed: true },
    ], { axis, fraction, ...(selected !== undefined ? { marker: { step: selected, label: `selected: step ${selected}` } } : {}) });
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

import { describe, expect, it } from 'vitest';
import { niceTicks, renderReport } from './report.js';

/** The SVG of the chart titled `title` in a report. */
function chartOf(html: string, title: string): string {
  const svg = html.split('<svg').find((s) => s.includes(`aria-label="${title}"`));
  expect(svg, `a chart titled ${title}`).toBeDefined();
  return svg!.split('</svg>')[0];
}
/** The labels of a chart's ticks on one axis, in order. */
const tickLabels = (svg: string, axis: 'x' | 'y'): string[] =>
  [...svg.split(`<g class="${axis}-ticks"`)[1].split('</g></g>')[0].matchAll(/<text[^>]*>([^<]*)<\/text>/g)].map((m) => m[1]);

describe('renderReport', () => {
  const html = renderReport({
    runName: 'demo<1>',
    config: { lr: 1e-4, secret_free: true },
    metrics: [
      { step: 0, val_success: 0.25, train_reward: 0.3 },
      { step: 1, train_reward: 0.5, loss: 0.12, kl: 0.001 },
      { step: 2, val_success: 0.625, train_reward: 0.7, loss: 0.08, kl: 0.002 },
    ],
    before: [{ scenario_id: 's1', task: 'Find <b>bk-001</b>', reward: 0, messages: [{ role: 'user', content: 'Find bk-001' }] }],
    after: [{ scenario_id: 's1', reward: 1, messages: [{ role: 'assistant', content: null, tool_calls: [{ function: { name: 'get_book', arguments: '{"book_id":"bk-001"}' } }] }] }],
    summary: ['best step 2'],
    breakdowns: [{ title: 'Test <set>', columns: ['untrained', 'best'], rows: [
      { by: 'tool', key: 'get_book', scenarios: 2, success: [0.5, 1] },
      { by: 'difficulty', key: '1', scenarios: 2, success: [0.5, null] },
    ] }],
  });

  it('is self-contained: no scripts, no external URLs but the SVG namespace', () => {
    expect(html).not.toMatch(/<script/i);
    const urls = [...html.matchAll(/https?:\/\/[^\s"'<>]+/g)].map((m) => m[0]);
    expect(urls.every((u) => u === 'http://www.w3.org/2000/svg')).toBe(true);
  });

  it('draws one curve per metric with a point per step that has it, and escapes user text', () => {
    const chart = (title: string) => html.split('<svg').find((s) => s.includes(`aria-label="${title}"`))!;
    expect(chart('Validation success').match(/<circle/g)).toHaveLength(2);
    expect(chart('Train reward (mean)').match(/<circle/g)).toHaveLength(3);
    expect(chart('Tool-call validity')).toContain('no data');
    // Curves of rollout servers and asynchronous rollouts appear only in runs that have them.
    expect(html).not.toContain('Rollout staleness');
    expect(renderReport({ runName: 'a', config: {}, metrics: [{ step: 1, staleness_mean: 0.5 }], before: [], after: [] })).toContain('aria-label="Rollout staleness (mean, in steps)"');
    expect(html).toContain('Find &lt;b&gt;bk-001&lt;/b&gt;');
    expect(html).toContain('demo&lt;1&gt;');
    expect(html).toContain('get_book({&quot;book_id&quot;:&quot;bk-001&quot;})');
  });

  it('shows success by tool and by difficulty, one column per checkpoint', () => {
    const table = html.split('<h3>Test &lt;set&gt;</h3>')[1].split('</table>')[0];
    expect(table).toContain('<td>get_book</td><td>2</td><td>50.0%</td><td>100.0%</td>');
    expect(table).toContain('<td>1</td><td>2</td><td>50.0%</td><td>–</td>');
  });

  it('labels both axes with round ticks and what they count', () => {
    const reward = chartOf(html, 'Train reward (mean)');
    expect(tickLabels(reward, 'x')).toEqual(['0', '1', '2']);
    expect(tickLabels(reward, 'y')).toEqual(['0.3', '0.4', '0.5', '0.6', '0.7']);
    expect(reward).toMatch(/<text class="x-label"[^>]*>step<\/text>/);
    expect(reward).toMatch(/<text class="y-label"[^>]*>reward<\/text>/);
    // A fraction runs from 0 to 100 %, whatever its values.
    const val = chartOf(html, 'Validation success');
    expect(tickLabels(val, 'y')).toEqual(['0%', '20%', '40%', '60%', '80%', '100%']);
    expect(val).toMatch(/<text class="y-label"[^>]*>success \(%\)<\/text>/);
  });

  it('marks no step where the run has not selected one yet, and draws no test series without test figures', () => {
    const val = chartOf(html, 'Validation success');
    expect(val).not.toContain('selected-step');
    expect(val).not.toContain('data-name="test"');
    expect(val).not.toContain('class="legend"');
  });

  describe('with a selected step and test figures', () => {
    const metrics = [
      { step: 0, val_success: 0.1, test_success: 0.125 },
      { step: 1, train_reward: 0.5 },
      { step: 2, val_success: 0.5 },
      { step: 3, train_reward: 0.6 },
      { step: 4, val_success: 0.375, test_success: 0.25, test_success_best: 0.375, best_step: 2 },
    ];
    const val = () => chartOf(renderReport({ runName: 'r', config: {}, metrics, before: [], after: [], selectedStep: 2 }), 'Validation and test success');
    const points = (series: string) => [...val().split(`data-name="${series}"`)[1].split('</g>')[0].matchAll(/<circle cx="([\d.]+)"[^>]*><title>([^<]*)<\/title>/g)].map((m) => [m[1], m[2]]);

    it('marks the selected step on the validation curve, at its validation point', () => {
      const marker = val().split('<g class="selected-step">')[1].split('</g>')[0];
      expect(marker).toContain('>selected: step 2</text>');
      const x = /<line x1="([\d.]+)"/.exec(marker)![1];
      expect(points('validation').find(([, t]) => t.startsWith('validation, step 2:'))![0]).toBe(x);
    });

    it('plots test success at the untrained model, the selected checkpoint and the last step, with a legend', () => {
      expect(points('test').map(([, t]) => t)).toEqual(['test, step 0: 12.5%', 'test, step 2: 37.5%', 'test, step 4: 25.0%']);
      expect(points('validation').map(([, t]) => t)).toEqual(['validation, step 0: 10.0%', 'validation, step 2: 50.0%', 'validation, step 4: 37.5%']);
      expect(val()).toMatch(/<g class="legend".*>validation<\/text>.*>test<\/text>/);
    });
  });
});

describe('niceTicks', () => {
  it('covers the range with 1, 2 or 5 times a power of ten, whole steps where asked', () => {
    expect(niceTicks(0, 30, 6, 1)).toEqual([0, 5, 10, 15, 20, 25, 30]);
    expect(niceTicks(0, 2, 6, 1)).toEqual([0, 1, 2]);
    expect(niceTicks(0.3, 0.7, 5)).toEqual([0.3, 0.4, 0.5, 0.6, 0.7]);
    expect(niceTicks(-0.013, 0.021, 5)).toEqual([-0.02, -0.01, 0, 0.01, 0.02, 0.03]);
    expect(niceTicks(0, 0.0031, 4)).toEqual([0, 0.001, 0.002, 0.003, 0.004]);
  });
});

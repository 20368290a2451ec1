import { describe, expect, it } from 'vitest';
import { renderReport } from './report.js';

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
});

import { describe, expect, it } from 'vitest';
import { AdapterRoutes } from './adapter-routes.js';

describe('AdapterRoutes', () => {
  it('retires a replaced adapter only when its last request has ended', () => {
    const unloaded: string[] = [];
    const routes = new AdapterRoutes((a) => unloaded.push(a));
    routes.set('m', 'm@1');
    routes.acquire(routes.target('m')!); // a request begins on m@1
    routes.set('m', 'm@2');
    expect(routes.target('m')).toBe('m@2');
    expect(unloaded).toEqual([]); // still in use
    routes.release('m@1');
    expect(unloaded).toEqual(['m@1']);
    routes.set('m', 'm@3'); // m@2 was never used: unloaded at once
    expect(unloaded).toEqual(['m@1', 'm@2']);
  });

  it('holds requests for a name until every hold is released', async () => {
    const routes = new AdapterRoutes(() => undefined);
    const order: string[] = [];
    const release1 = routes.hold('m');
    const release2 = routes.hold('m');
    const waiting = routes.ready('m').then(() => order.push('ready'));
    const other = routes.ready('other').then(() => order.push('other'));
    await other;
    release1();
    order.push('released 1');
    // Let every queued reaction run: `ready` must still be pending behind the second hold.
    await Promise.resolve().then(() => new Promise((r) => setImmediate(r)));
    expect(order).toEqual(['other', 'released 1']);
    release2();
    await waiting;
    expect(order).toEqual(['other', 'released 1', 'ready']);
  });

  it('keeps hidden adapters and route targets out of the served names', () => {
    const routes = new AdapterRoutes(() => undefined);
    routes.hide('m@train');
    routes.set('m', 'm@1');
    expect(routes.isInternal('m@train')).toBe(true);
    expect(routes.isInternal('m@1')).toBe(true);
    expect(routes.isInternal('other')).toBe(false);
    expect(routes.list()).toEqual([{ name: 'm', adapter: 'm@1' }]);
  });
});

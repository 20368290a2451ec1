/**
 * Optional OpenTelemetry traces (`--otlp-endpoint URL`): spans for training steps, rollouts, model calls and tool
 * calls, exported over OTLP/HTTP (JSON) through the official @opentelemetry packages.
 *
 * Off by default and free when off: the packages are imported only by startOtlpTracing, and until then every
 * span is one shared no-op object. The span that is current (the parent of spans started without an explicit
 * one) is kept in an AsyncLocalStorage here, so no context manager package is needed and nothing is registered
 * globally.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Context, Span, Tracer } from '@opentelemetry/api';
import { McprlError } from './errors.js';

export type TraceAttributes = Record<string, string | number | boolean | undefined>;

/** One span: attributes may be added until it ends. */
export interface TraceSpan {
  set(attributes: TraceAttributes): void;
  /** Marks the span as failed, with a message. */
  fail(message: string): void;
  end(): void;
}

const NOOP: TraceSpan = { set() {}, fail() {}, end() {} };

interface Backend {
  tracer: Tracer;
  api: typeof import('@opentelemetry/api');
}

class OtelSpan implements TraceSpan {
  constructor(readonly span: Span, readonly ctx: Context) {}
  set(attributes: TraceAttributes): void {
    this.span.setAttributes(defined(attributes));
  }
  fail(message: string): void {
    this.span.setStatus({ code: 2, message }); // SpanStatusCode.ERROR
  }
  end(): void {
    this.span.end();
  }
}

let backend: Backend | null = null;
const current = new AsyncLocalStorage<OtelSpan>();

/** Whether traces are being recorded. */
export function tracingOn(): boolean {
  return backend !== null;
}

/** Starts a span under `parent` (default: the current span, else a new trace). End it with `end()`. */
export function startSpan(name: string, attributes: TraceAttributes = {}, parent?: TraceSpan): TraceSpan {
  if (!backend) return NOOP;
  const up = parent instanceof OtelSpan ? parent : current.getStore();
  const ctx = up ? up.ctx : backend.api.ROOT_CONTEXT;
  const span = backend.tracer.startSpan(name, { attributes: defined(attributes) }, ctx);
  return new OtelSpan(span, backend.api.trace.setSpan(ctx, span));
}

/** Runs `f` with `span` as the current span (the parent of spans `f` starts without an explicit one). */
export function withinSpan<T>(span: TraceSpan, f: () => Promise<T>): Promise<T> {
  return span instanceof OtelSpan ? current.run(span, f) : f();
}

/** Runs `f` inside a new span that ends with it (failed, with the error's message, when `f` throws). */
export async function inSpan<T>(name: string, attributes: TraceAttributes, f: (span: TraceSpan) => Promise<T>): Promise<T> {
  const span = startSpan(name, attributes);
  try {
    return await withinSpan(span, () => f(span));
  } catch (err) {
    span.fail(err instanceof Error ? err.message : String(err));
    throw err;
  } finally {
    span.end();
  }
}

/**
 * Starts exporting spans to an OTLP/HTTP collector. `endpoint` is the collector's base URL (as
 * OTEL_EXPORTER_OTLP_ENDPOINT; `/v1/traces` is appended) or its full traces URL. `shutdown()` flushes every span
 * still buffered and turns tracing off again.
 */
export async function startOtlpTracing(opts: { endpoint: string; serviceName?: string }): Promise<{ url: string; shutdown(): Promise<void> }> {
  if (backend) throw new McprlError('TRACING_ALREADY_ON', 'OpenTelemetry tracing is already on in this process');
  let mods;
  try {
    mods = await Promise.all([import('@opentelemetry/api'), import('@opentelemetry/sdk-trace-base'), import('@opentelemetry/exporter-trace-otlp-http'), import('@opentelemetry/resources')]);
  } catch (err) {
    throw new McprlError('TRACING_UNAVAILABLE', `the @opentelemetry packages could not be loaded (npm install): ${(err as Error).message}`, { cause: err });
  }
  const [api, sdk, otlp, resources] = mods;
  const url = /\/v1\/traces\/?$/.test(opts.endpoint) ? opts.endpoint : `${opts.endpoint.replace(/\/+$/, '')}/v1/traces`;
  const provider = new sdk.BasicTracerProvider({
    resource: resources.resourceFromAttributes({ 'service.name': opts.serviceName ?? 'mcprl' }),
    spanProcessors: [new sdk.BatchSpanProcessor(new otlp.OTLPTraceExporter({ url }))],
  });
  backend = { tracer: provider.getTracer('mcprl'), api };
  return {
    url,
    shutdown: async () => {
      backend = null;
      await provider.shutdown();
    },
  };
}

function defined(a: TraceAttributes): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const [k, v] of Object.entries(a)) if (v !== undefined) out[k] = v;
  return out;
}

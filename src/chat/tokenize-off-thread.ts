/**
 * Tokenising on a worker thread of its own, for texts long enough to hold the event loop: byte-level BPE is
 * superlinear in the length of a word (a million-character word takes Qwen3's tokenizer about 40 s), so a server
 * that tokenised such a prompt on its own thread would stop answering everything else, `/health` included, until it
 * was done (issue 12 §3). The worker loads the same tokenizer files with the same library, so its ids are the ones
 * the caller's thread would have produced. Jobs run one at a time; aborting one terminates the worker (the library's
 * encode cannot be interrupted), and the other jobs, the one it was running among them, start again on a fresh one.
 */
import { Worker } from 'node:worker_threads';
import { McprlError } from '../util/errors.js';

/** The tokenizer's files: what the worker loads. */
export interface TokenizerFiles {
  tokenizerJson: string;
  /** tokenizer_config.json, when the folder has one. */
  tokenizerConfig: string | null;
}

export interface OffThreadEncodeOptions {
  signal?: AbortSignal;
  /**
   * A shared flag (Int32Array over a SharedArrayBuffer): the worker waits while its element 0 is 0 before it
   * tokenises this text. Tests use it to hold a job in flight without relying on how long tokenising takes.
   */
  hold?: Int32Array;
}

// CommonJS (an eval'd worker is one); the library is ESM, so it comes in through import() of its resolved URL.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { readFileSync } = require('node:fs');
const ready = import(workerData.library).then(({ Tokenizer }) => {
  const json = JSON.parse(readFileSync(workerData.files.tokenizerJson, 'utf8'));
  const config = workerData.files.tokenizerConfig ? JSON.parse(readFileSync(workerData.files.tokenizerConfig, 'utf8')) : {};
  return new Tokenizer(json, config);
});
parentPort.on('message', async ({ id, text, hold }) => {
  try {
    const tok = await ready;
    if (hold) Atomics.wait(hold, 0, 0);
    parentPort.postMessage({ id, ids: tok.encode(text, { add_special_tokens: false }).ids });
  } catch (err) {
    parentPort.postMessage({ id, error: String((err && err.message) || err) });
  }
});
`;

interface Job {
  id: number;
  text: string;
  hold?: Int32Array;
  resolve: (ids: number[]) => void;
  reject: (err: Error) => void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

export class OffThreadTokenizer {
  private readonly files: TokenizerFiles;
  private worker: Worker | null = null;
  private readonly jobs = new Map<number, Job>();
  private nextId = 1;
  /** Workers started so far (a test reads it to see that an abort replaced the worker). */
  workersStarted = 0;

  constructor(files: TokenizerFiles) {
    this.files = files;
  }

  /** The token ids of `text` (no special tokens added), computed on the worker thread. */
  encode(text: string, opts: OffThreadEncodeOptions = {}): Promise<number[]> {
    if (opts.signal?.aborted) return Promise.reject(aborted());
    return new Promise<number[]>((resolve, reject) => {
      const job: Job = { id: this.nextId++, text, resolve, reject, ...(opts.hold ? { hold: opts.hold } : {}) };
      if (opts.signal) {
        job.signal = opts.signal;
        job.onAbort = () => this.abort(job);
        opts.signal.addEventListener('abort', job.onAbort, { once: true });
      }
      this.jobs.set(job.id, job);
      this.post(job);
    });
  }

  /** Stops the worker; jobs still running are rejected. */
  close(): void {
    const w = this.worker;
    this.worker = null;
    for (const job of [...this.jobs.values()]) this.settle(job, aborted());
    void w?.terminate();
  }

  private post(job: Job): void {
    const w = this.ensureWorker();
    // Busy, the worker keeps the process alive (a caller awaiting its ids has nothing else to); idle, it must not.
    w.ref();
    w.postMessage({ id: job.id, text: job.text, ...(job.hold ? { hold: job.hold } : {}) });
  }

  private ensureWorker(): Worker {
    if (this.worker) return this.worker;
    const w = new Worker(WORKER_SOURCE, { eval: true, workerData: { library: import.meta.resolve('@huggingface/tokenizers'), files: this.files } });
    this.workersStarted++;
    w.on('message', (m: { id: number; ids?: number[]; error?: string }) => {
      const job = this.jobs.get(m.id);
      if (!job) return;
      if (m.ids) this.settle(job, null, m.ids);
      else this.settle(job, new McprlError('TOKENIZE_FAILED', `tokenising failed: ${m.error}`));
    });
    w.on('error', (err) => this.fail(w, err));
    w.on('exit', (code) => this.fail(w, new Error(`the tokenizer worker exited with code ${code}`)));
    // After the listeners: adding a 'message' listener refs the worker again.
    w.unref();
    this.worker = w;
    return w;
  }

  /** The worker died on its own: its jobs fail (a job that crashes a worker would crash the next one too). */
  private fail(w: Worker, err: Error): void {
    if (this.worker !== w) return;
    this.worker = null;
    for (const job of [...this.jobs.values()]) this.settle(job, new McprlError('TOKENIZE_FAILED', `tokenising failed: ${err.message}`, { cause: err }));
  }

  /**
   * One job's caller gave up: the worker is terminated and the other jobs are sent to a fresh one. Terminating
   * even when the abandoned job is still queued keeps this simple; the job it was running starts again.
   */
  private abort(job: Job): void {
    if (!this.jobs.has(job.id)) return;
    this.settle(job, aborted());
    const old = this.worker;
    this.worker = null;
    void old?.terminate();
    for (const other of [...this.jobs.values()]) this.post(other);
  }

  private settle(job: Job, err: Error | null, ids?: number[]): void {
    this.jobs.delete(job.id);
    if (this.jobs.size === 0) this.worker?.unref();
    if (job.onAbort) job.signal?.removeEventListener('abort', job.onAbort);
    if (err) job.reject(err);
    else job.resolve(ids!);
  }
}

function aborted(): McprlError<'TOKENIZE_ABORTED'> {
  return new McprlError('TOKENIZE_ABORTED', 'tokenising was aborted');
}

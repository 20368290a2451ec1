/**
 * The serve check of the device run (scripts/device-e2e.sh): the openai SDK against `mcprl serve` at URL, as an
 * agent framework talks to it — a streamed answer, then a tool call forced with tool_choice 'required'.
 *   node device-e2e-client.mjs URL MODEL
 * Waits for /health (the model loads first), then prints one JSON object per figure on stdout; exit 1 when
 * a check failed.
 */
import OpenAI from 'openai';

const [url, model] = process.argv.slice(2);
if (!url || !model) {
  console.error('usage: device-e2e-client URL MODEL');
  process.exit(64);
}
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o));

async function waitForHealth(deadlineMs: number): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    try {
      const r = await fetch(new URL('/health', url));
      if (r.ok) return (performance.now() - t0) / 1000;
    } catch {
      // not listening yet
    }
    if (performance.now() - t0 > deadlineMs) throw new Error(`${url}/health did not answer within ${deadlineMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

const client = new OpenAI({ baseURL: new URL('/v1', url).href, apiKey: 'unused' });
let ok = true;
try {
  emit({ figure: 'e2e.serve.ready', value: Number((await waitForHealth(300_000)).toFixed(1)), unit: 's' });

  const t0 = performance.now();
  let first = 0;
  let text = '';
  let chunks = 0;
  const stream = await client.chat.completions.create({
    model, stream: true, max_tokens: 64, temperature: 0,
    messages: [{ role: 'user', content: 'Name one book about the sea.' }],
  });
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta.content ?? '';
    if (d && !first) first = performance.now();
    text += d;
    chunks++;
  }
  const streamed = chunks > 1;
  ok &&= streamed;
  emit({ figure: 'e2e.serve.stream', ok: streamed, chunks, chars: text.length, first_token_s: first ? Number(((first - t0) / 1000).toFixed(3)) : null, unit: 'chunks' });

  const tools = [{ type: 'function' as const, function: { name: 'get_book', description: 'Look a book up by its id', parameters: { type: 'object', properties: { book_id: { type: 'string' } }, required: ['book_id'] } } }];
  const r = await client.chat.completions.create({
    model, max_tokens: 96, temperature: 0, tools, tool_choice: 'required',
    messages: [{ role: 'user', content: 'What is the title of the book bk-021?' }],
  });
  const call = r.choices[0]?.message.tool_calls?.[0];
  const args = call && call.type === 'function' ? call.function.arguments : '';
  let parsed = false;
  try { parsed = typeof JSON.parse(args) === 'object'; } catch { parsed = false; }
  const called = call?.type === 'function' && call.function.name === 'get_book' && parsed;
  ok &&= called;
  emit({ figure: 'e2e.serve.tool_call', ok: called, finish_reason: r.choices[0]?.finish_reason, arguments: args, unit: 'call' });
} catch (e) {
  ok = false;
  emit({ figure: 'e2e.serve', ok: false, error: e instanceof Error ? e.message : String(e) });
}
process.exit(ok ? 0 : 1);

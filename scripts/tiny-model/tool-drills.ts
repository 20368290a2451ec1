/**
 * Tool drills: synthetic agent transcripts against made-up tools of made-up domains (films, cities, products,
 * members; never the bookshop), with fresh random ids and values in every drill. They teach the generic tool-use
 * skill an instruction-tuned LLM brings to any server — copy the task's values into a call's arguments, copy an id
 * out of a search result into the next call, read the field the task asks for out of a JSON record and report
 * it — which a model trained from scratch on one server's few hundred transcripts lacks: there it can memorise
 * the server's few entities instead of copying. A drill always looks things up and reports them (the skill);
 * the habits stay the bookshop warm-up's business (build.ts mixes tool drills into the skill cycles only).
 */
import type { ChatMessage } from '../../src/agent/policy.js';
import { COMPLETE_TASK_TOOL, DEFAULT_SYSTEM_PROMPT } from '../../src/agent/rollout.js';
import type { OpenAITool } from '../../src/mcp/openai-tools.js';
import { CURRENCIES } from '../../fixtures/server/bookshop.js';
import { COUNTRIES, int, pick, WORDS } from './copy-drills.js';
import type { makeRng } from '../random-model.js';

type Rng = ReturnType<typeof makeRng>;
type Value = string | number | string[];

const TITLE_WORDS = WORDS.filter((w) => w !== 'The');
const COLORS = ['red', 'blue', 'green', 'black', 'white', 'silver'];

const money = (rng: Rng) => Number(`${int(rng, 1, 99)}.${String(int(rng, 0, 99)).padStart(2, '0')}`);
const label = (rng: Rng) => (rng.uniform() < 0.5 ? `The ${pick(rng, TITLE_WORDS)} ${pick(rng, TITLE_WORDS)}` : `${pick(rng, TITLE_WORDS)} ${pick(rng, TITLE_WORDS)}`);

/** A made-up domain: its entity, id prefix, label field and the value fields of its records. */
interface Domain {
  kind: string;
  plural: string;
  prefix: string;
  labelKey: string;
  fields: Record<string, (rng: Rng) => Value>;
}

const idList = (prefix: string) => (rng: Rng) => Array.from({ length: int(rng, 2, 4) }, () => `${prefix}-${String(int(rng, 0, 999)).padStart(3, '0')}`);

const DOMAINS: Domain[] = [
  { kind: 'film', plural: 'films', prefix: 'fm', labelKey: 'title', fields: { director: (r) => `${pick(r, TITLE_WORDS)} ${pick(r, TITLE_WORDS)}`, year: (r) => int(r, 1930, 2025), rating: (r) => int(r, 10, 99) / 10, country: (r) => pick(r, COUNTRIES), price: money } },
  { kind: 'city', plural: 'cities', prefix: 'ct', labelKey: 'name', fields: { country: (r) => pick(r, COUNTRIES), population: (r) => int(r, 1000, 999999), founded: (r) => int(r, 800, 1990), district_ids: idList('ds') } },
  { kind: 'product', plural: 'products', prefix: 'pr', labelKey: 'name', fields: { price: money, stock: (r) => int(r, 0, 500), color: (r) => pick(r, COLORS), weight: (r) => int(r, 1, 900) } },
  { kind: 'member', plural: 'members', prefix: 'mb', labelKey: 'name', fields: { country: (r) => pick(r, COUNTRIES), age: (r) => int(r, 18, 90), points: (r) => int(r, 0, 9999), team: (r) => pick(r, TITLE_WORDS), club_ids: idList('cl'), price: money } },
];

function record(rng: Rng, d: Domain): Record<string, Value> {
  const r: Record<string, Value> = { id: `${d.prefix}-${String(int(rng, 0, 999)).padStart(3, '0')}`, [d.labelKey]: label(rng) };
  for (const [k, f] of Object.entries(d.fields)) r[k] = f(rng);
  return r;
}

function tool(name: string, description: string, props: Record<string, object>, required: string[]): OpenAITool {
  return { type: 'function', function: { name, description, parameters: { type: 'object', properties: props, required } } };
}

/** A transcript builder: each call is one assistant turn followed by its tool result (open-drills.ts's too). */
export class Transcript {
  readonly messages: ChatMessage[];
  private n = 0;
  constructor(task: string) {
    this.messages = [{ role: 'system', content: DEFAULT_SYSTEM_PROMPT }, { role: 'user', content: task }];
  }
  call(name: string, args: Record<string, unknown>, result: unknown) {
    const id = `call_${this.n++}`;
    this.messages.push(
      { role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name, arguments: JSON.stringify(args) } }] },
      { role: 'tool', tool_call_id: id, name, content: typeof result === 'string' ? result : JSON.stringify(result, null, 2) },
    );
    return this;
  }
  answer(summary: string) {
    return this.call(COMPLETE_TASK_TOOL.function.name, { summary }, 'Task marked complete.');
  }
}

/** How a drill reports a value: a list as its items joined by commas. */
const said = (v: Value) => (Array.isArray(v) ? v.join(', ') : String(v));

/**
 * One tool drill: a lookup by id, a search then a lookup, a search listing every match, a computation, a
 * lookup whose price feeds a computation, or a listing filtered by country.
 */
export function toolDrill(rng: Rng): { messages: ChatMessage[]; tools: OpenAITool[] } {
  const d = pick(rng, DOMAINS);
  const idKey = `${d.kind}_id`;
  const search = tool(`search_${d.plural}`, `Search ${d.plural} by words in the ${d.labelKey}.`, { query: { type: 'string' } }, ['query']);
  const get = tool(`get_${d.kind}`, `Full record of one ${d.kind}.`, { [idKey]: { type: 'string', pattern: `^${d.prefix}-\\d{3}$` } }, [idKey]);
  const calc = tool('convert_amount', 'Convert an amount into a currency.', { amount: { type: 'number' }, currency: { type: 'string', enum: [...CURRENCIES] } }, ['amount', 'currency']);
  const list = tool(`list_${d.plural}`, `List ${d.plural}, optionally only those of one country.`, { country: { type: 'string' } }, []);
  const tools = [search, get, calc, ...('country' in d.fields ? [list] : []), COMPLETE_TASK_TOOL];
  const target = record(rng, d);
  const field = pick(rng, Object.keys(d.fields));
  const others = Array.from({ length: int(rng, 0, 3) }, () => record(rng, d));
  const brief = (r: Record<string, Value>) => ({ id: r.id, [d.labelKey]: r[d.labelKey] });
  const convert = (amount: number) => {
    const currency = pick(rng, CURRENCIES);
    const rate = int(rng, 50, 20000) / 100;
    return { amount, currency, rate, converted: Math.round(amount * rate * 100) / 100 };
  };
  switch (int(rng, 0, 5)) {
    case 0: {
      const task = pick(rng, [`What is the ${field} of the ${d.kind} ${target.id}?`, `Look up the ${d.kind} ${target.id} and give me its ${field}.`, `I'd like to know the ${field} of ${d.kind} ${target.id}.`]);
      return { tools, messages: new Transcript(task).call(get.function.name, { [idKey]: target.id }, target).answer(said(target[field])).messages };
    }
    case 1: {
      const name = String(target[d.labelKey]);
      const task = pick(rng, [`What is the ${field} of the ${d.kind} "${name}"?`, `Which ${field} does the ${d.kind} "${name}" have?`, `Find the ${d.kind} "${name}" and tell me its ${field}.`]);
      const results = [target, ...others].sort(() => rng.uniform() - 0.5).map(brief);
      return {
        tools,
        messages: new Transcript(task)
          .call(search.function.name, { query: name }, { total_matches: results.length, results })
          .call(get.function.name, { [idKey]: target.id }, target)
          .answer(said(target[field])).messages,
      };
    }
    case 2: {
      const word = pick(rng, TITLE_WORDS);
      const matches = [target, ...others].map((r) => ({ ...r, [d.labelKey]: `${r[d.labelKey]} ${word}` }));
      const task = pick(rng, [`Search ${d.plural} for "${word}" and give me the ${d.labelKey} of every one.`, `I want the ${d.labelKey} of all ${d.plural} found for "${word}".`]);
      return {
        tools,
        messages: new Transcript(task)
          .call(search.function.name, { query: word }, { total_matches: matches.length, results: matches.map(brief) })
          .answer(matches.map((r) => r[d.labelKey]).join(', ')).messages,
      };
    }
    case 3: {
      const out = convert(money(rng));
      const key = pick(rng, ['rate', 'converted'] as const);
      const task = pick(rng, [`Convert the amount ${out.amount} into "${out.currency}"; I want the ${key}.`, `With amount ${out.amount} and currency "${out.currency}", convert it and tell me the ${key}.`]);
      return { tools, messages: new Transcript(task).call(calc.function.name, { amount: out.amount, currency: out.currency }, out).answer(String(out[key])).messages };
    }
    case 4: {
      if (!('price' in d.fields)) return toolDrill(rng);
      const out = convert(target.price as number);
      const task = pick(rng, [`Take the price of the ${d.kind} ${target.id} and convert it into "${out.currency}". What is the rate?`, `First get the price of the ${d.kind} ${target.id}, then convert that amount to currency "${out.currency}"; tell me the rate.`]);
      return {
        tools,
        messages: new Transcript(task)
          .call(get.function.name, { [idKey]: target.id }, target)
          .call(calc.function.name, { amount: out.amount, currency: out.currency }, out)
          .answer(String(out.rate)).messages,
      };
    }
    default: {
      if (!('country' in d.fields)) return toolDrill(rng);
      const country = String(target.country);
      const matches = [target, ...others].map((r): Record<string, Value> => ({ ...r, country }));
      const key = pick(rng, ['id', d.labelKey]);
      const task = pick(rng, [`List the ${d.plural} of country "${country}" and give me the ${key} of each.`, `Which ${d.plural} are from "${country}"? I want every ${key}.`]);
      return {
        tools,
        messages: new Transcript(task)
          .call(list.function.name, { country }, { [d.plural]: matches.map(brief) })
          .answer(matches.map((r) => r[key]).join(', ')).messages,
      };
    }
  }
}

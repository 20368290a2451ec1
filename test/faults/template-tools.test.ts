/**
 * §3 of issue 12: a tool whose schema the model's chat template cannot render fails with an error naming the
 * tool and why, instead of the template engine's `Unknown NumericValue filter: items`. Real parts: the real
 * chat-template renderer (@huggingface/jinja) and the bundled tiny model's tokenizer; the template is one that
 * walks each parameter's schema, as some models' templates do (written here, since none ships with this repo).
 */
import { describe, expect, it } from 'vitest';
import path from 'node:path';
import { ChatTemplate, ChatTemplateError } from '../../src/chat/chat-template.js';
import { HfTokenizer } from '../../src/chat/tokenizer.js';
import { REPO_ROOT } from '../helpers/servers.js';
import { fault } from './fault-table.js';

const WALKING_TEMPLATE =
  '{% for t in tools %}{{ t.function.name }}:{% for k, v in t.function.parameters.properties | items %}{{ k }}{% for kk, vv in v | items %}.{{ kk }}{% endfor %}{% endfor %};{% endfor %}' +
  '{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}';

const tool = (name: string, properties: Record<string, unknown>) => ({ type: 'function' as const, function: { name, description: name, parameters: { type: 'object', properties } } });

describe('a tool schema the chat template cannot render', () => {
  it('fails with an error naming the tool, and the other tools render', async () => {
    const tok = await HfTokenizer.load(path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop'));
    const t = new ChatTemplate(WALKING_TEMPLATE, { bos_token: tok.bosToken, eos_token: tok.eosToken, pad_token: null, unk_token: null });
    const good = tool('get_book', { book_id: { type: 'string' } });
    // A property whose schema is a number, not an object: valid JSON, but the template iterates it.
    const odd = tool('set_limit', { limit: 5 });
    const messages = [{ role: 'user' as const, content: 'hi' }];
    expect(t.render(messages, { tools: [good] })).toContain('get_book:book_id.type;');
    let err: unknown;
    try {
      t.render(messages, { tools: [good, odd] });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ChatTemplateError);
    const msg = (err as Error).message;
    expect(msg).toMatch(/cannot render the schema of tool "set_limit": .*items/);
    expect(msg).not.toContain('"get_book"');
    fault('tool schema the chat template cannot render', 'error names the tool and why', msg.slice(0, 90));
  });
});

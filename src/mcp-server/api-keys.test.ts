import { describe, expect, it } from 'vitest';
import { ApiKeyPolicy, parseKeyGrant, urlUnder } from './api-keys.js';

describe('urlUnder', () => {
  it('matches the same origin at or below the prefix path, at a segment boundary', () => {
    expect(urlUnder('https://api.openai.com/v1', 'https://api.openai.com/')).toBe(true);
    expect(urlUnder('https://host/v1', 'https://host/v1')).toBe(true);
    expect(urlUnder('https://host/v1/', 'https://host/v1')).toBe(true);
    expect(urlUnder('https://host/v1/chat', 'https://host/v1/')).toBe(true);
    expect(urlUnder('https://host/v1evil', 'https://host/v1')).toBe(false);
    expect(urlUnder('https://host/v2', 'https://host/v1/')).toBe(false);
    expect(urlUnder('https://api.openai.com.evil.example/v1', 'https://api.openai.com/')).toBe(false);
    expect(urlUnder('https://api.openai.com@evil.example/v1', 'https://api.openai.com/')).toBe(false);
    expect(urlUnder('http://api.openai.com/v1', 'https://api.openai.com/')).toBe(false);
    expect(urlUnder('https://api.openai.com:8443/v1', 'https://api.openai.com/')).toBe(false);
    expect(urlUnder('not a url', 'https://api.openai.com/')).toBe(false);
  });
});

describe('ApiKeyPolicy', () => {
  const env = { OPENAI_API_KEY: 'sk-oai', GROQ_KEY: 'gsk-1', MCPRL_TOKEN: 'server-token' };

  it('sends OPENAI_API_KEY to OpenAI only, and no key elsewhere when none is named', () => {
    const p = new ApiKeyPolicy([], env);
    expect(p.resolve(undefined, undefined, 'generator')).toEqual({ baseURL: 'https://api.openai.com/v1', apiKey: 'sk-oai', env: 'OPENAI_API_KEY' });
    expect(p.resolve(undefined, 'http://127.0.0.1:9/v1', 'generator')).toEqual({ baseURL: 'http://127.0.0.1:9/v1', apiKey: undefined, env: undefined });
    expect(() => p.resolve('OPENAI_API_KEY', 'http://127.0.0.1:9/v1', 'judge')).toThrow(/may be sent only to https:\/\/api\.openai\.com\//);
  });

  it('refuses variables the operator did not grant, and grants them per base URL', () => {
    expect(() => new ApiKeyPolicy([], env).resolve('MCPRL_TOKEN', 'https://api.openai.com/v1', 'generator')).toThrow(expect.objectContaining({ code: 'API_KEY_NOT_ALLOWED' }));
    expect(() => new ApiKeyPolicy([], env).resolve('MCPRL_TOKEN', 'https://api.openai.com/v1', 'generator')).toThrow(/--allow-key-env MCPRL_TOKEN=/);
    const p = new ApiKeyPolicy([parseKeyGrant('GROQ_KEY=https://api.groq.com/openai/v1')], env);
    expect(p.resolve('GROQ_KEY', 'https://api.groq.com/openai/v1', 'judge').apiKey).toBe('gsk-1');
    expect(() => p.resolve('GROQ_KEY', 'https://evil.example/openai/v1', 'judge')).toThrow(/not to https:\/\/evil\.example/);
  });

  it('uses $OPENAI_BASE_URL as the default base URL, checked like any other', () => {
    const p = new ApiKeyPolicy([], { ...env, OPENAI_BASE_URL: 'http://127.0.0.1:9/v1' });
    expect(p.resolve(undefined, undefined, 'generator')).toMatchObject({ baseURL: 'http://127.0.0.1:9/v1', apiKey: undefined });
  });

  it('parses grants strictly', () => {
    expect(parseKeyGrant('A_B=https://x.example/v1')).toEqual({ env: 'A_B', baseUrl: 'https://x.example/v1' });
    for (const bad of ['A_B', '=https://x', '1A=https://x', 'A=ftp://x', 'A=https://u:p@x/', 'A=']) expect(() => parseKeyGrant(bad), bad).toThrow(expect.objectContaining({ code: 'API_KEY_NOT_ALLOWED' }));
  });
});

"""Renders a model folder's chat template with Python's jinja2 the way transformers' apply_chat_template does.

An independent renderer for the chat-template tests (mcprl renders with @huggingface/jinja). The environment
is transformers' own (_compile_jinja_template): a sandboxed environment with trim_blocks and lstrip_blocks,
loop controls, a {% generation %} block, the raise_exception and strftime_now globals, and a tojson filter
that keeps non-ASCII characters and HTML as they are. The variables are apply_chat_template's: the
tokenizer's special tokens, then the caller's kwargs, then messages, tools (None when not given), documents
and add_generation_prompt. Messages are normalised as mcprl and vLLM do before rendering: null content
becomes '' and tool-call arguments that are JSON objects in a string are parsed.

Usage: jinja_render.py REQUEST.json, where the request is
  {"model_dir": DIR, "cases": [{"messages": [...], "tools": [...] | null, "add_generation_prompt": bool,
                                "kwargs": {...}}]}
Prints a JSON list with, per case, {"text": ...} or {"error": ...}.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationBlock(Extension):
    """transformers' {% generation %} block (it marks assistant text); rendering only needs its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def special_tokens(config):
    """transformers' special_tokens_map: the named tokens that are set, and the additional ones."""
    out = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if value is not None:
            out[key] = value
    extra = config.get("additional_special_tokens")
    if extra:
        out["additional_special_tokens"] = [t.get("content") if isinstance(t, dict) else t for t in extra]
    return out


def normalise(message):
    m = dict(message)
    if m.get("content") is None:
        m["content"] = ""
    calls = []
    for call in m.get("tool_calls") or []:
        fn = dict(call["function"])
        if isinstance(fn.get("arguments"), str):
            try:
                parsed = json.loads(fn["arguments"])
                if isinstance(parsed, dict):
                    fn["arguments"] = parsed
            except ValueError:
                pass
        calls.append({**call, "function": fn})
    if calls:
        m["tool_calls"] = calls
    return m


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        request = json.load(f)
    with open(f"{request['model_dir']}/tokenizer_config.json", encoding="utf-8") as f:
        config = json.load(f)
    source = config["chat_template"]
    if isinstance(source, list):  # named templates: the default one
        source = next(t["template"] for t in source if t["name"] == "default")
    template = environment().from_string(source)
    results = []
    for case in request["cases"]:
        variables = {**special_tokens(config), **(case.get("kwargs") or {})}
        try:
            text = template.render(
                messages=[normalise(m) for m in case["messages"]],
                tools=case.get("tools"),
                documents=None,
                add_generation_prompt=case["add_generation_prompt"],
                **variables,
            )
            results.append({"text": text})
        except jinja2.exceptions.TemplateError as e:
            results.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()

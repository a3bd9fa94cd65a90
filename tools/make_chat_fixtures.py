#!/usr/bin/env python3
"""Python jinja2's renderings of llama.cpp's real chat templates, as the fixture of squeeze's
Jinja engine (tests/tokenizer/jinja_fixture_test.cpp).

The templates are the .jinja files of llama.cpp's models/templates/ in the llama-cpp-python sdist
(scripts/fetch_vocab_tests.sh caches them in models/templates/). Each is rendered the way Hugging
Face's apply_chat_template renders it (a sandboxed environment with trim_blocks, lstrip_blocks and
the loop-control extension; raise_exception; tojson without HTML escaping; strftime_now) for a few
conversations, with and without the generation prompt. A rendering that raises records the
error instead; a template jinja2 itself cannot parse is left out.

  tools/make_chat_fixtures.py --out tests/data/chat_templates.json"""

import argparse
import datetime
import hashlib
import json
import os
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Fixed so that templates that print today's date render reproducibly (squeeze's test sets the
# same date).
NOW = datetime.datetime(2026, 1, 1, 12, 0, 0)
BOS = "<BOS>"
EOS = "<EOS>"

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "What is 2+2?"},
     {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And 3+3?"}],
    [{"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "  Tell me a joke.\nMake it \"short\" & <sweet>.  "}],
]


# Small templates over the engine's corners (scoping, operators, filters, tests, methods, whitespace
# control, errors), rendered with DATA and the third conversation as `messages`.
DATA = {"n": 3, "f": 2.5, "s": " H\u00e9llo, World ", "flag": True, "none": None, "empty": [],
        "rows": [{"name": "b", "v": 2}, {"name": "a", "v": 1}, {"name": "c"}],
        "d": {"z": 1, "a": [1, 2], "m": {"k": "v"}}}

SNIPPETS = [
    # scoping: a fresh scope per iteration, namespace() to carry state, macros see globals
    "{% set x = 0 %}{% for i in range(3) %}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}",
    "{% set ns = namespace(c=0, s='') %}{% for m in messages %}{% set ns.c = ns.c + 1 %}"
    "{% set ns.s = ns.s ~ m.role[0] %}{% endfor %}{{ ns.c }} {{ ns.s }}",
    "{% macro m(a, b='B') %}[{{ a }}{{ b }}{{ g }}]{% endmacro %}{% set g = 7 %}{{ m(1) }}{{ m(2, b=3) }}",
    "{% if true %}{% set z = 3 %}{% endif %}{{ z }}",
    "{% set t %}block {{ data.n }}{% endset %}[{{ t }}]",
    "{% set a, b = [1, 2] %}{{ a }}{{ b }}",
    # loops
    "{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
    "{{ loop.length }}{{ loop.revindex }}|{% endfor %}",
    "{% for m in messages if m.role == 'user' %}{{ loop.index }}:{{ m.content }} {% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}"
    "{% endif %}{{ i }}{% endfor %}",
    "{% for x in data.empty %}x{% else %}none{% endfor %}",
    "{% for k, v in data.d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for k in data.d %}{{ k }}{% endfor %}",
    "{% for c in 'h\u00e9!' %}[{{ c }}]{% endfor %}",
    "{% for i in range(1, 10, 3) %}{{ i }}{% endfor %}{% for i in range(3, 0, -1) %}{{ i }}{% endfor %}",
    "{% for a in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }} {% endfor %}",
    # printing and operators
    "{{ none }} {{ true }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-7 }} {{ 10 / 4 }} {{ 7 // 2 }} "
    "{{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 'ab' * 3 }} {{ [1] + [2] }}",
    "{{ ['a', \"it's\", none, 1.5, {'k': [true]}] }} {{ {'a': 'b'} }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' > 'a' }} {{ 1 == 1.0 }} {{ 'a' in 'cat' }} "
    "{{ 2 in [1, 2] }} {{ 'z' in data.d }} {{ 'q' not in data.d }}",
    "{{ data.none or 'x' }} {{ 0 and 1 }} {{ 'y' if data.flag }}|{{ 'y' if not data.flag }}| "
    "{{ 'a' if false else 'b' if true else 'c' }}",
    "{{ 'a' ~ 1 ~ none ~ data.missing }}",
    "{{ data.s[1:4] }}|{{ data.s[::-1] }}|{{ messages[-1].content }}|{{ messages[1:3] | length }}"
    "|{{ data.d['a'][0] }}|{{ data.d.a.1 }}",
    "{{ messages[10] }}|{{ data.nothing }}|{{ data.d.m.nope }}|{{ none.x }}",
    # whitespace control
    "a  {%- if true -%}  b  {%- endif -%}  c",
    "line\n    {% if true %}\n    x\n    {% endif %}\nend\n",
    "  {%+ if true %}kept{% endif %}\n  {# comment #}\nafter {{- ' y ' -}} .",
    "{% for i in range(2) %}\n  {{ i }}\n{% endfor %}\n",
    # filters
    "{{ data.s | trim }}|{{ 'xxhixx' | trim('x') }}|{{ data.s | upper }}|{{ data.s | lower }}|"
    "{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}",
    "{{ data.rows | map(attribute='name') | join(', ') }}|{{ data.rows | selectattr('v', 'defined') "
    "| map(attribute='v') | list }}|{{ data.rows | rejectattr('name', 'equalto', 'a') | list | length }}",
    "{{ data.rows | selectattr('v') | map(attribute='name') | first }}{{ data.rows | last }}",
    "{{ data.d | tojson }}|{{ data.d | tojson(indent=2) }}|{{ 'h\u00e9 \"q\"\\n' | tojson }}|"
    "{{ [1.5, none, true] | tojson }}",
    "{{ data.missing | default('dflt') }}|{{ '' | default('e', true) }}|{{ '' | default('e') }}|"
    "{{ data.none | default('n') }}",
    "{{ data.d | dictsort }}|{{ data.d | items | list }}|{{ [3, 1, 2] | sort }}|"
    "{{ [3, 1, 2] | sort(reverse=true) }}|{{ [1, 2, 1] | unique | list }}|{{ [1, 2] | reverse | list }}",
    "{{ 'a-b-c' | replace('-', '+') }}|{{ '42' | int + 1 }}|{{ 'x' | int }}|{{ '2.5' | float }}|"
    "{{ 3 | string ~ 'x' }}|{{ -3 | abs }}|{{ 2.567 | round(2) }}|{{ 'a b  c' | wordcount }}",
    "{{ 'one\ntwo\n\nthree' | indent(2) }}|{{ 'one\ntwo' | indent(2, true) }}|{{ [1, 2, 3] | sum }}"
    "|{{ [3, 1, 2] | min }}{{ [3, 1, 2] | max }}|{{ '<a&b>' | e }}|{{ '<a>' | safe }}",
    "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|"
    "{{ ['a', 'b'] | map('upper') | join }}|{{ data.none | selectattr('x') | list }}",
    # tests
    "{{ data is mapping }}{{ messages is iterable }}{{ 'x' is string }}{{ 1 is number }}"
    "{{ 1.5 is float }}{{ 1 is integer }}{{ data.none is none }}{{ data.q is defined }}"
    "{{ data.q is undefined }}{{ true is boolean }}{{ 3 is odd }}{{ 4 is even }}"
    "{{ 9 is divisibleby 3 }}{{ 'x' is in 'xy' }}{{ 'ab' is lower }}{{ data.n is eq 3 }}"
    "{{ data.flag is true }}{{ range is callable }}{{ data.none is not none }}",
    # methods
    "{{ data.s.strip() }}|{{ data.s.lstrip() }}|{{ data.s.rstrip() }}|{{ 'xyhix'.strip('xy') }}|"
    "{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}",
    "{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }}{{ 'Hi'.upper() }}"
    "{{ 'Hi'.lower() }}{{ 'aaa'.replace('a', 'b', 2) }}{{ 'abc'.find('c') }}{{ 'a.b'.count('.') }}",
    "{{ '-'.join(['a', 'b']) }}|{{ '{} and {}'.format(1, 'x') }}|{{ '{0}{0}'.format('r') }}|"
    "{{ '{name}!'.format(name='n') }}",
    "{{ data.d.get('z') }}|{{ data.d.get('nope') }}|{{ data.d.get('nope', 5) }}|{{ data.d.keys() | list }}"
    "|{{ data.d.values() | list | length }}|{{ data.d['items'] is defined }}",
    "{{ dict(a=1, b='x') }}|{{ namespace(a=1).a }}|{{ strftime_now('%Y-%m-%d %d %b %Y') }}",
    "{% set d = {1: 'a', 'b': 2, 16384: none} %}{{ d }}|{{ d | tojson }}|{{ d[1] }}{{ d[16384] }}|"
    "{{ 1 in d }}{{ 2 in d }}|{{ d.get(1) }}|{{ d | items | list }}|"
    "{% for k in d %}{{ k + 1 if k is integer else k }},{% endfor %}|{{ {3: 1, 2: 0} | dictsort }}",
    # errors jinja2 raises
    "{{ raise_exception('refused: ' ~ messages | length) }}",
    "{{ data.missing.attr }}",
    "{{ 1 + data.missing }}",
    "{{ 1 + 'a' }}",
    "{{ data.missing() }}",
    "{{ 1 / 0 }}",
    "{{ data.rows.append(1) }}",
    "{{ 3 < 'a' }}",
    "{% for a, b in [[1, 2, 3]] %}{% endfor %}",
]


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return NOW.strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--templates", default=os.path.join(root, "models", "templates"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "data", "chat_templates.json"))
    args = ap.parse_args()
    env = environment()
    out = {"jinja2": jinja2.__version__, "now": NOW.isoformat(), "bos_token": BOS, "eos_token": EOS,
           "conversations": CONVERSATIONS, "templates": []}
    for name in sorted(os.listdir(args.templates)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(args.templates, name), "rb") as f:
            raw = f.read()
        try:
            template = env.from_string(raw.decode("utf-8"))
        except jinja2.exceptions.TemplateError as e:
            print(f"{name}: jinja2 cannot parse it ({e}); left out", file=sys.stderr)
            continue
        cases = []
        for ci, messages in enumerate(CONVERSATIONS):
            for gen in (False, True):
                case = {"conversation": ci, "add_generation_prompt": gen}
                try:
                    case["text"] = template.render(messages=messages, add_generation_prompt=gen,
                                                   bos_token=BOS, eos_token=EOS, tools=None,
                                                   documents=None)
                except Exception as e:  # noqa: BLE001 - any failure is the expected outcome
                    case["error"] = f"{type(e).__name__}: {e}"
                cases.append(case)
        out["templates"].append({"name": name, "sha256": hashlib.sha256(raw).hexdigest(), "cases": cases})
    out["data"] = DATA
    out["snippets"] = []
    for source in SNIPPETS:
        case = {"source": source}
        try:
            case["text"] = env.from_string(source).render(messages=CONVERSATIONS[2], data=DATA)
        except Exception as e:  # noqa: BLE001 - the error is the expected outcome
            case["error"] = f"{type(e).__name__}: {e}"
        out["snippets"].append(case)
    with open(args.out + ".part", "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(args.out + ".part", args.out)
    n = sum(len(t["cases"]) for t in out["templates"])
    print(f"{len(out['templates'])} templates, {n} renderings, {len(SNIPPETS)} snippets -> {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()

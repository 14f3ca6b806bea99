"""Value-preserving rewrites, composed at random: a known name or size sent through Jinja constructs the analysis
must model exactly (or give up on), then used.

:func:`reaches` draws a template whose statements send a name (``__init__``, ``__globals__``...) or a
size (``10**8``...) through one to three rewrites drawn from many: each a construct of Jinja, a filter,
a method or a global used in a way that keeps the value (a list, a namespace, a macro with positional,
keyword or default arguments, ``varargs``/``kwargs``, ``caller`` and ``caller=``, a set block, a loop, a
dict built and read in many ways, a mutation through an alias, ``update`` with pairs, ``tojson`` with and
without key sorting, HTML escaping, the text of a container, ``join``/``reverse``/``batch``/``slice``/
``groupby``/``unique``/``min``/``max``/``sum``/``map(attribute=)`` with an indexed path, str methods,
``format``, conditional expressions, ``default``, ``cycler``/``joiner``/``loop.cycle``...), then uses it
as an attribute name on a Jinja global or the request, or as a count. Nobody lists the compositions: the
strategy draws them. Rendered unsandboxed, a template the audit does not flag must never reach an internal
name nor exceed its cost envelope.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


class _Names:
    def __init__(self) -> None:
        self.n = 0

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


def _text_rewrites(v: str, names: _Names) -> list[tuple[str, str]]:
    """(statements, expression) rewrites of a text expression ``v`` (a lower-case name)."""
    ns, s, m, mc, a, b, d, j = (names.fresh(p) for p in ("ns", "s", "m", "mc", "a", "b", "d", "j"))
    set_ns = f"{{% set {ns} = namespace(a='') %}}"
    return [
        ("", f"({v}|list|join)"),
        ("", f"(({v}|reverse|join)|reverse|join)"),
        ("", f"([{v}]|first)"),
        ("", f"(['x', {v}][true])"),
        ("", f"([{v}, 'x'][false])"),
        ("", f"([0, {v}][1])"),
        ("", f"([{v}]|last)"),
        ("", f"namespace(a={v}).a"),
        (f"{set_ns}{{% set {ns}.a = {v} %}}", f"{ns}.a"),
        (f"{{% set {s} %}}{{{{ {v} }}}}{{% endset %}}", s),
        (f"{{% set {s} -%}}  {{{{ {v} }}}}  {{%- endset %}}", f"({s}|trim)"),
        (f"{{% macro {m}(x) %}}{{{{ x }}}}{{% endmacro %}}", f"{m}({v})"),
        (f"{{% macro {m}(x) %}}{{{{ x }}}}{{% endmacro %}}", f"{m}(x={v})"),
        (f"{{% macro {m}(x={v}) %}}{{{{ x }}}}{{% endmacro %}}", f"{m}()"),
        (f"{{% macro {m}() %}}{{{{ varargs[0] }}}}{{% endmacro %}}", f"{m}({v})"),
        (f"{{% macro {m}() %}}{{{{ kwargs.k }}}}{{% endmacro %}}", f"{m}(k={v})"),
        (
            f"{{% macro {mc}() %}}{{{{ caller() }}}}{{% endmacro %}}{{% set {s} %}}{{% call {mc}() %}}{{{{ {v} }}}}"
            "{% endcall %}{% endset %}",
            s,
        ),
        (
            f"{{% macro {mc}() %}}{{{{ caller(1) }}}}{{% endmacro %}}{{% set {s} %}}{{% call(x) {mc}() %}}"
            f"{{{{ {v} }}}}{{% endcall %}}{{% endset %}}",
            s,
        ),
        (
            f"{{% macro {m}() %}}{{{{ {v} }}}}{{% endmacro %}}{{% macro {mc}() %}}{{{{ caller() }}}}{{% endmacro %}}",
            f"{mc}(caller={m})",
        ),
        (f"{set_ns}{{% for x in [{v}] %}}{{% set {ns}.a = x %}}{{% endfor %}}", f"{ns}.a"),
        (f"{set_ns}{{% for x in [1] %}}{{% set {ns}.a = loop.cycle({v}) %}}{{% endfor %}}", f"{ns}.a"),
        (f"{set_ns}{{% with x = {v} %}}{{% set {ns}.a = x %}}{{% endwith %}}", f"{ns}.a"),
        (f"{{% macro {m}(x) %}}{{{{ x }}}}{{% endmacro %}}{{% set {a} = [{m}] %}}", f"{a}[0]({v})"),
        (
            f"{{% macro {m}(x) %}}{{{{ x }}}}{{% endmacro %}}{{% set {a} = [] %}}{{% do {a}.append({m}) %}}",
            f"{a}[0]({v})",
        ),
        (f"{{% macro {m}(x) %}}{{{{ x }}}}{{% endmacro %}}", f"{{'f': {m}}}.f({v})"),
        (f"{{% macro {m}(x) %}}{{{{ x }}}}{{% endmacro %}}", f"namespace(f={m}).f({v})"),
        (f"{{% macro {m}(x) %}}{{{{ x }}}}{{% endmacro %}}", f"([{m}]|first)({v})"),
        (f"{{% macro {m}(x) %}}{{{{ x }}}}{{% endmacro %}}", f"([{m}, {m}]|sort|first)({v})"),
        ("", f"namespace({{'a': {v}}}).a"),
        ("", f"namespace([('a', {v})]).a"),
        ("", f"dict([('k', {v})]).k"),
        ("", f"dict({{'k': {v}}}).k"),
        ("", f"{{'k': {v}}}.k"),
        ("", f"dict(k={v}).k"),
        ("", f"{{'k': {v}}}['k']"),
        ("", f"({{'k': {v}}}|dictsort|first)[1]"),
        ("", f"({{'k': {v}}}.items()|list)[0][1]"),
        ("", f"({{{v}: 1}}.keys()|first)"),
        ("", f"({{{v}: 1}}|first)"),
        ("", f"({{'k': {v}}}.get('k'))"),
        ("", f"({{'k': {v}}}.pop('k'))"),
        ("", f"([{v}].pop())"),
        (f"{{% set {a} = [] %}}{{% set {b} = {a} %}}{{% do {b}.append({v}) %}}", f"{a}[0]"),
        (f"{{% set {a} = ['x'] %}}{{% set {b} = [{a}] %}}{{% do {b}[0].insert(0, {v}) %}}", f"{a}[0]"),
        (f"{{% set {d} = {{}} %}}{{% do {d}.update([('k', {v})]) %}}", f"{d}.k"),
        (f"{{% set {d} = {{}} %}}{{% do {d}.update(k={v}) %}}", f"{d}.k"),
        (f"{{% set {d} = {{}} %}}{{% do {d}.setdefault('k', {v}) %}}", f"{d}['k']"),
        (f"{{% set {a} = [] %}}{{% do {a}.extend([{v}]) %}}", f"({a}|first)"),
        ("", f"({{'z': {v}, 'a': 'y'}}|tojson).split('\"')[3]"),
        ("", f"({{'z': 'y', 'a': {v}}}|tojson).split('\"')[3]"),
        ("", f"(({v}|tojson)[1:-1])"),
        ("", f"((('<<<<' ~ {v})|e)[16:])"),
        ("", f"((('&' ~ {v})|escape)[5:])"),
        ("", f"(([{v}]|string)[2:-2])"),
        ("", f"(({{'k': {v}}}|string)[7:-2])"),
        ("", f"((namespace(a={v})|string)[18:-3])"),
        ("", f"((({v},)|string)[2:-3])"),
        ("", f"([{v}]|join)"),
        ("", f"([[{v}]]|map('join')|first)"),
        ("", f"([{v}]|batch(1)|first|first)"),
        ("", f"([{v}]|slice(1)|first|first)"),
        ("", f"([{{'k': {v}}}]|groupby('k')|first|first)"),
        ("", f"([{v}, {v}]|unique|first)"),
        ("", f"([{v}]|max)"),
        ("", f"([{v}, {v}]|min)"),
        ("", f"([[{v}]]|sum(start=[])|first)"),
        ("", f"([[{v}]]|map(attribute='0')|first)"),
        ("", f"([{{'a': [{v}]}}]|map(attribute='a.0')|first)"),
        ("", f"([{v}]|map('string')|first)"),
        ("", f"([{v}]|map('trim')|first)"),
        ("", f"([{v}]|select|first)"),
        ("", f"([{v}]|selectattr('upper')|first)"),
        ("", f"([{v}]|reject('none')|first)"),
        ("", f"({v}|trim|trim|trim|trim|trim|trim|trim|trim|trim)"),
        ("", f"({v}|lower|string|trim|lower|string|trim|lower|e|string)"),
        ("", f"{v}.strip()"),
        ("", f"{v}.upper().lower()"),
        ("", f"{v}.swapcase().swapcase()"),
        ("", f"{v}.casefold()"),
        ("", f"{v}.ljust(1)"),
        ("", f"{v}.partition('!')[0]"),
        ("", f"{v}.split('!')[0]"),
        ("", f"{v}.splitlines()[0]"),
        ("", f"' '.join([{v}]).strip()"),
        ("", f"{v}.removeprefix('!')"),
        ("", f"{v}.replace('!', '?')"),
        ("", f"('x' ~ {v})[1:]"),
        ("", f"({v} ~ 'x')[:-1]"),
        ("", f"'{{}}'.format({v})"),
        ("", f"'{{0}}'.format({v})"),
        ("", f"('%s' % {v})"),
        ("", f"('%s'|format({v}))"),
        ("", f"('%(a)s'|format(a={v}))"),
        ("", f"({v}|center(1))"),
        ("", f"({v}|wordwrap(1000))"),
        ("", f"({v}|truncate(1000))"),
        ("", f"({v}|indent(0))"),
        ("", f"({v}|string|safe)"),
        ("", f"({v}|striptags)"),
        ("", f"({v}|urlencode)"),
        ("", f"({v} if true else 'x')"),
        ("", f"('x' if false else {v})"),
        ("", f"({v} or 'x')"),
        ("", f"('' or {v})"),
        ("", f"(undefined_thing|default({v}))"),
        ("", f"(none|default({v}, true))"),
        ("", f"cycler({v}).next()"),
        ("", f"cycler({v}).current"),
        (f"{{% set {j} = joiner({v}) %}}{{% set _ = {j}() %}}", f"{j}()"),
        ("", f"(({v}|list)|join(''))"),
        ("", f"({v}|batch(100)|first|join)"),
        ("", f"(({v}|list|reverse|list|reverse|list)|join)"),
    ]


def _size_rewrites(v: str, names: _Names) -> list[tuple[str, str]]:
    """(statements, expression) rewrites of an integer expression ``v``."""
    ns, m, r = (names.fresh(p) for p in ("ns", "m", "r"))
    return [
        ("", f"([{v}]|first)"),
        ("", f"namespace(a={v}).a"),
        ("", f"({{'k': {v}}}.k)"),
        ("", f"(({v}|string)|int)"),
        ("", f"(({v}|string|list|join)|int)"),
        (f"{{% macro {m}(x) %}}{{{{ x }}}}{{% endmacro %}}", f"({m}({v})|int)"),
        (f"{{% set {ns} = namespace(a=0) %}}{{% set {ns}.a = {v} %}}", f"{ns}.a"),
        ("", f"([0, {v}][true])"),
        ("", f"({v} + 0)"),
        ("", f"({v} * 1)"),
        ("", f"({v} // 1)"),
        ("", f"(({v} ~ '')|int)"),
        ("", f"('%d'|format({v})|int)"),
        ("", f"({v}|abs)"),
        ("", f"({v}|round|int)"),
        ("", f"([{v}]|max)"),
        ("", f"([{v}]|sum)"),
        ("", f"({v}|float|int)"),
        ("", f"(({v}|tojson)|int)"),
        (f"{{% set {r} = range %}}", f"({r}({v})|length)"),
        ("", f"([{v}, 1]|sort|last)"),
    ]


def _launder(draw: Any, value: str, kind: str, names: _Names, depth: int) -> tuple[str, str]:
    pre = ""
    expr = value
    for _ in range(depth):
        options = _text_rewrites(expr, names) if kind == "text" else _size_rewrites(expr, names)
        p, expr = draw(st.sampled_from(options))
        pre += p
    return pre, expr


def _name_source(draw: Any, word: str) -> str:
    """A literal ``word`` or the same text built from pieces (the underscores too)."""
    how = draw(st.integers(0, 3))
    if how == 0:
        return repr(word)
    core = word.strip("_")
    k = len(word) - len(word.lstrip("_"))
    if how == 1 or not k:
        return f"('{'_' * k}' ~ '{core}' ~ '{'_' * k}')"
    if how == 2:
        u = "('%c'|format(95))" if draw(st.booleans()) else "((lipsum|string)[18])"
        return f"({u} * {k} ~ '{core}' ~ {u} * {k})"
    return f"('{core}'.join(['{'_' * k}', '{'_' * k}']))"


TARGETS = (
    ("cycler", "__init__", "__globals__"),
    ("joiner", "__init__", "__globals__"),
    ("namespace", "__init__", "__globals__"),
    ("lipsum", "__globals__", "os"),
    ("messages", "__class__", "__base__"),
    ("''", "__class__", "__mro__"),
    ("raise_exception", "__globals__", "__builtins__"),
)
SIZES = (10**8, 10**9, 5 * 10**7, 2**40)
USES = (
    "{% for i in range(N) %}{% endfor %}",
    "{{ ('x' * N)|length }}",
    "{{ 'x'|center(N)|length }}",
    "{{ ([0] * N)|length }}",
    "{{ lipsum(N)|length }}",
    "{{ ('{:>' ~ N ~ '}').format('x')|length }}",
    "{{ ('%' ~ N ~ 's')|format('x')|length }}",
    "{{ ('x' ~ '\\n' ~ 'y')|indent(N)|length }}",
    "{{ range(N)|batch(3)|list|length }}",
    "{{ range(N)|slice(3)|list|length }}",
    "{{ ('\\t' * 10).expandtabs(N)|length }}",
    "{{ ('x' * 10).zfill(N)|length }}",
    "{{ ('x' * 10).ljust(N)|length }}",
    "{{ ('x' * 10)|wordwrap(1, true, 'y' * N)|length }}",
    "{{ 'x'|truncate(N)|length }}{{ ('x ' * 50)|replace(' ', 'y' * N)|length }}",
)


@st.composite
def reaches(draw: Any) -> str:
    """A template that reaches an internal name through laundered names, or spends a laundered size."""
    names = _Names()
    if draw(st.integers(0, 3)) == 0:
        size = draw(st.sampled_from(SIZES))
        pre, n = _launder(draw, str(size), "size", names, draw(st.integers(1, 3)))
        return pre + draw(st.sampled_from(USES)).replace("N", n)
    obj, first, second = draw(st.sampled_from(TARGETS))
    pre1, a = _launder(draw, _name_source(draw, first), "text", names, draw(st.integers(1, 3)))
    pre2, b = _launder(draw, _name_source(draw, second), "text", names, draw(st.integers(0, 2)))
    how = draw(st.integers(0, 4))
    if how == 0:
        use = f"{{{{ {obj}[{a}][{b}] }}}}"
    elif how == 1:
        use = f"{{{{ ({obj}|attr({a}))[{b}] }}}}"
    elif how == 2:
        use = f"{{{{ [{obj}]|map(attribute={a})|map(attribute={b})|list }}}}"
    elif how == 3:
        use = f"{{{{ ([{obj}]|selectattr({a})|list) }}}}{{{{ {obj}[{a}] }}}}"
    else:
        use = f"{{% set t = {obj}[{a}] %}}{{{{ t[{b}] if t is defined else '' }}}}"
    return pre1 + pre2 + use

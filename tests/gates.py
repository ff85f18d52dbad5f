"""Which of the code's ``Check(...)`` sites gate their claims, proven on the builders' own inputs (issue
[honest-gates]).

A site *gates* when some input to the function that builds its claim makes the check false while the claim is
still built, so the claim is withheld by the check and not by an ``if`` beside it. The proof here is mechanical:

1. :func:`check_sites` lists every ``Check(...)`` call in ``routestats/`` with :mod:`ast` (file, line);
2. :func:`recording` notes each check's call site as it is made and every call of a claim builder (a function of
   ``routestats.compose`` that returns claims) while real reports are built;
3. :func:`sweep` calls each recorded builder again on changed *inputs* (its frames' columns set to other values,
   negated, shifted, rows dropped or doubled, labels relabelled, scalars changed) and notes each site whose check
   is false in a claim that the builder built and that is withheld. A false verdict counts only where every cell
   the check reads is defined: an input made of NaN proves nothing but the NaN (:func:`defined_false`). A check
   that tests only definedness (``x == x``) can fail on nothing else; it is proven by one undefined input cell and
   listed apart (:data:`DEFINEDNESS`).

The mutations change a builder's input, never the claim it returned: a check that restates the builder's own
``if`` (the builder returns nothing unless the condition holds) is never false on a built claim, however the
input changes.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import math
import pkgutil
import re
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def check_sites() -> dict[tuple[str, int], tuple[str, str]]:
    """Every ``Check(...)`` call in ``routestats/``: (path from the repository root, line of the call) -> (its name
    and its test as written in the source: a string, or an f-string's source)."""
    out = {}
    for p in sorted((ROOT / "routestats").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Check":
                args = list(node.args) + [k.value for k in node.keywords if k.arg in ("name", "test")]
                name, test = (a.value if isinstance(a, ast.Constant) else ast.unparse(a) for a in args[:2])
                out[(p.relative_to(ROOT).as_posix(), node.lineno)] = (name, test)
    return out


def claims_in(result) -> list:
    from routestats.claim import Claim

    built = [result] if isinstance(result, Claim) else \
        [c for c in result if isinstance(c, Claim)] if isinstance(result, (list, tuple)) else []
    return [x for c in built for x in (c, *c.verdicts)]  # a claim's verdicts: the gates of its words


@contextmanager
def recording(monkeypatch):
    """Within: each new ``Check`` knows its call site (``_site``) and every builder call is appended to the list
    yielded, as (function, args, kwargs)."""
    import routestats.compose as compose
    from routestats.claim import Check

    original = Check.__post_init__

    def post(self):
        original(self)
        f = sys._getframe(2)  # Check(...) -> the dataclass __init__ -> here
        object.__setattr__(self, "_site", (Path(f.f_code.co_filename).resolve().relative_to(ROOT).as_posix(),
                                           f.f_lineno))

    monkeypatch.setattr(Check, "__post_init__", post)
    calls: list = []

    def wrap(fn):
        @functools.wraps(fn)
        def recorded(*a, **k):
            result = fn(*a, **k)
            if claims_in(result):
                calls.append((fn, a, k))
            return result
        return recorded

    mods = [importlib.import_module(m.name) for m in pkgutil.walk_packages(compose.__path__, "routestats.compose.")]
    wrapped = {obj: wrap(obj) for mod in mods for obj in vars(mod).values()
               if inspect.isfunction(obj) and obj.__module__.startswith("routestats.compose")}
    for mod in list(sys.modules.values()):  # every name bound to a builder, where it is imported too
        if getattr(mod, "__name__", "").startswith("routestats"):
            for name, obj in list(vars(mod).items()):
                if inspect.isfunction(obj) and obj in wrapped:
                    monkeypatch.setattr(mod, name, wrapped[obj])
    yield calls


def names(expr: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]\w*", expr))


def is_definedness(test: str) -> bool:
    """A check that tests only that cells are defined (``a == a and b == b``, ``a != a``)."""
    return re.fullmatch(r"\s*(\w+ (==|!=) \w+)(\s+and\s+\w+ (==|!=) \w+)*\s*", test) is not None and all(
        a == b for a, _, b in re.findall(r"(\w+) (==|!=) (\w+)", test))


def defined_false(claim, check) -> bool:
    """``check`` is false on ``claim`` and every cell it reads is defined."""
    rows = claim.evidence if claim.evidence is not None else pd.DataFrame()
    if check.where and len(rows):
        rows = rows.query(check.where, engine="python")
    used = names(check.test) | names(check.where)
    for col in used & set(rows.columns):
        if pd.api.types.is_numeric_dtype(rows[col]) and rows[col].isna().any():
            return False
    return not any(isinstance(claim.design[k], float) and math.isnan(claim.design[k]) for k in used & set(claim.design))


def frame_mutations(df: pd.DataFrame, read: set[str]):
    """Changed copies of an input frame, (label, frame): every number at once, then each column the claims'
    checks read set to values either side of the usual thresholds, rows dropped and doubled, labels relabelled."""
    num = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c]) and df[c].dtype != bool]
    for tag, f in (("neg", lambda x: -x), ("plus1", lambda x: x + 1.0), ("two", lambda x: x * 0 + 2.0),
                   ("mtwo", lambda x: x * 0 - 2.0), ("half", lambda x: x * 0 + 0.5), ("tiny", lambda x: x * 0 + 1e-4),
                   ("zero", lambda x: x * 0.0)):
        yield tag, df.assign(**{k: f(df[k].astype(float)) for k in num})
    for k in [c for c in num if c in read]:
        for tag, v in (("0", 0.0), ("tiny", 1e-4), ("half", 0.5), ("0.9", 0.9), ("two", 2.0), ("mtwo", -2.0),
                       ("big", 1e6)):
            yield f"{k}={tag}", df.assign(**{k: v})
        x = df[k].astype(float)
        yield f"{k}=neg", df.assign(**{k: -x})
        if len(df) > 1:
            yield f"{k}=first_neg", df.assign(**{k: [-float(x.iloc[0])] + list(x.iloc[1:])})
        if len(df):
            yield f"{k}=nan0", df.assign(**{k: [np.nan] + list(x.iloc[1:])})
            yield f"{k}=nan", df.assign(**{k: np.nan})
    for k in df.columns:
        if df[k].dtype == bool:
            yield f"{k}=flip", df.assign(**{k: ~df[k]})
            yield f"{k}=F", df.assign(**{k: False})
        elif not pd.api.types.is_numeric_dtype(df[k]) and k in read:
            for v in list(pd.unique(df[k].dropna()))[:6]:
                yield f"{k}={v}", df.assign(**{k: v})
            if len(df):
                yield f"{k}=none0", df.assign(**{k: [None] + list(df[k].iloc[1:])})
    if len(df):
        yield "first", df.iloc[:1]
        yield "dropfirst", df.iloc[1:]
        yield "double", pd.concat([df, df], ignore_index=True)
        yield "empty", df.iloc[:0]
    if len(df) > 12:
        yield "dozen", df.iloc[:12]
    elif len(df):  # more rows than a listing shows (points, layers)
        yield "many", pd.concat([df] * (13 // len(df) + 1), ignore_index=True)


def scalar_mutations(v):
    if isinstance(v, bool):
        yield "flip", not v
    elif isinstance(v, int):
        for w in sorted({0, 1, 2, 3, v + 1, v * 10 + 7, -v}):
            yield str(w), w
    elif isinstance(v, float) and v == v:
        for w in (0.0, 1e-4, 0.5, 0.9, 2.0, -v, float("nan")):
            yield str(w), w


def dict_mutations(d: dict):
    """Each value of a mapping changed as :func:`scalar_mutations` changes it."""
    for k, v in d.items():
        for tag, w in scalar_mutations(v):
            yield f"{k}={tag}", {**d, k: w}


def input_mutations(args: tuple, kwargs: dict, read: set[str]):
    """(label, args, kwargs): one input changed at a time."""
    def muts(x):
        if isinstance(x, pd.DataFrame):
            return frame_mutations(x, read)
        return dict_mutations(x) if isinstance(x, dict) else scalar_mutations(x)
    for i, x in enumerate(args):
        for tag, y in muts(x):
            yield f"arg{i}:{tag}", args[:i] + (y,) + args[i + 1:], kwargs
    for name, x in kwargs.items():
        for tag, y in muts(x):
            yield f"{name}:{tag}", args, {**kwargs, name: y}


def sweep(calls, per_builder: int = 2) -> tuple[dict, dict, set]:
    """Each recorded builder (its first ``per_builder`` calls) on its inputs and their mutations:
    ({site: (builder, mutation)} of checks false on defined cells in a built, withheld claim; the same for checks
    false only where a cell they read is undefined; every site seen)."""
    import warnings

    proven, undefined, seen, done = {}, {}, set(), {}
    for fn, a, k in list(calls):  # a snapshot: the builders' own inner calls are recorded again meanwhile
        done[fn] = done.get(fn, 0) + 1
        if done[fn] > per_builder:
            continue
        read = set().union(*[names(ch.test) | names(ch.where) for c in claims_in(fn(*a, **k)) for ch in c.requires],
                           set())
        for tag, a2, k2 in [("as built", a, k)] + list(input_mutations(a, k, read)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    result = fn(*a2, **k2)
                except Exception:  # an input the builder refuses: no claim, no proof
                    continue
            for c in claims_in(result):
                try:
                    verdicts = c.checks
                except Exception:  # a check written with the changed scalar in it (alpha := nan) does not parse
                    continue
                for check, (_, ok) in zip(c.requires, verdicts):
                    site = getattr(check, "_site", None)
                    seen.add(site)
                    if not ok and not c.holds:
                        (proven if defined_false(c, check) else undefined).setdefault(site, (fn.__name__, tag))
    return proven, undefined, seen

"""A sentence a report may print, as data: a :class:`Claim`, its preconditions (:class:`Check` s, computed from the rows
it cites by :func:`evaluate`), the per-row :func:`verdicts` that let its checks choose each row's word, and the tidy
frame of a report's claims (:func:`claims_frame`, what ``claims.csv`` holds). Sections and reports
(:mod:`routestats.report`) carry claims; this module needs pandas only.
"""

from __future__ import annotations

import ast
import functools
import io
import operator
import tokenize
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

__all__ = ["Check", "Claim", "evaluate", "row_verdicts", "verdicts", "claims_frame", "asserted_rows",
           "expression_value"]


@dataclass(frozen=True)
class Check:
    """One precondition of a :class:`Claim`, computed from the claim's own evidence by :func:`evaluate`.

    ``test`` is a pandas expression over the columns of the evidence rows (``on="rows"``; only the rows
    matching the ``where`` expression, if given) or over the claim's ``design`` values and ``rows``, the
    number of evidence rows matching ``where`` (``on="design"``). ``every`` says how a row-wise test is
    reduced: ``"all"`` rows (true when none match), ``"any"`` row, or ``"same"`` (every row gives the
    same answer: one sign, one verdict).

    >>> import pandas as pd
    >>> ev = pd.DataFrame({"layer": [0, 1], "p": [0.01, 0.2], "lo": [0.1, -0.1], "asserted": ["rose", "includes"]})
    >>> c = Check("rose: p < alpha and lo > 0", "p < 0.05 and lo > 0", where="asserted == 'rose'")
    >>> evaluate(c, ev, {}), evaluate(Check("two layers", "rows == 2", on="design"), ev, {})
    (True, True)
    >>> evaluate(c, ev.assign(p=0.3), {})  # a raised p turns the precondition false
    False
    """

    name: str
    test: str
    where: str = ""
    on: str = "rows"  # rows | design
    every: str = "all"  # all | any | same

    def __post_init__(self):
        if self.on not in ("rows", "design") or self.every not in ("all", "any", "same"):
            raise ValueError(f"check {self.name!r}: on={self.on!r}, every={self.every!r}")


def evaluate(check: Check, evidence: pd.DataFrame | None, design: Mapping[str, Any]) -> bool:
    """Whether ``check`` holds of a claim's ``evidence`` rows and ``design`` values (see :class:`Check`).

    It shares no code with the sentence builders: it reads the rows the claim cites, as they are, and
    evaluates the check's own expression over them with pandas.
    """
    rows = evidence if evidence is not None else pd.DataFrame()
    if check.where:
        rows = rows.loc[expression_value(check.where, rows)] if len(rows) else rows
    if check.on == "design":
        env = pd.DataFrame([{**design, "rows": len(rows)}])
        return bool(expression_value(check.test, env).iloc[0])
    if not len(rows):
        return check.every in ("all", "same")
    verdict = row_verdicts(check, rows)
    if check.every == "any":
        return bool(verdict.any())
    if check.every == "same":
        return bool(verdict.all() or not verdict.any())
    return bool(verdict.all())


def row_verdicts(check: Check, rows: pd.DataFrame):
    """A row-wise check's value on each of ``rows`` (its test only: ``where`` and ``every`` are the caller's), as
    :func:`evaluate` reduces it and :func:`verdicts` reads it."""
    return expression_value(check.test, rows).astype(bool).to_numpy()


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.Pow: operator.pow, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
              ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
              ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.And: operator.and_, ast.Or: operator.or_,
              ast.Not: operator.invert, ast.Invert: operator.invert, ast.USub: operator.neg, ast.UAdd: operator.pos}


@functools.lru_cache(maxsize=1024)
def _parsed(expression: str) -> tuple[ast.expr, dict[str, str]]:
    """A test's syntax tree, read once: pandas' expression syntax (``and``/``&``, ``or``/``|``, ``not``/``~``,
    comparisons, arithmetic, ``abs``, `` `quoted` `` column names), each quoted name replaced by a placeholder
    (the dict maps it back)."""
    pieces = expression.split("`")
    if len(pieces) % 2 == 0:
        raise ValueError(f"test {expression!r}: an unclosed ` quote")
    quoted = {f"_rs_quoted_{i}": name for i, name in enumerate(pieces[1::2])}
    text = "".join(piece if i % 2 == 0 else f" _rs_quoted_{i // 2} " for i, piece in enumerate(pieces))
    # pandas reads & and | as `and` and `or`, with their precedence (not the bitwise operators')
    toks = [(tokenize.NAME, "and" if t.string == "&" else "or") if t.type == tokenize.OP and t.string in ("&", "|")
            else (t.type, t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)]
    return ast.parse(tokenize.untokenize(toks).strip(), mode="eval").body, quoted


def _value(node: ast.expr, names: dict[str, str], frame: pd.DataFrame):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        name = names.get(node.id, node.id)
        if name not in frame.columns:
            raise NameError(f"name {name!r} is not a column of the rows it tests "
                            f"({', '.join(map(str, frame.columns))})")
        return frame[name]
    if isinstance(node, ast.BoolOp):
        return functools.reduce(_OPERATORS[type(node.op)], (_value(v, names, frame) for v in node.values))
    if isinstance(node, ast.UnaryOp):
        return _OPERATORS[type(node.op)](_value(node.operand, names, frame))
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_value(node.left, names, frame), _value(node.right, names, frame))
    if isinstance(node, ast.Compare) and all(type(op) in _OPERATORS for op in node.ops):
        sides = [_value(x, names, frame) for x in (node.left, *node.comparators)]
        # a < b < c is (a < b) and (b < c), as pandas reads it
        return functools.reduce(operator.and_, (_OPERATORS[type(op)](a, b)
                                                for op, a, b in zip(node.ops, sides, sides[1:])))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "abs"
            and len(node.args) == 1 and not node.keywords):
        return np.abs(_value(node.args[0], names, frame))
    raise ValueError(f"a check's test may not use {ast.unparse(node)!r}")


def expression_value(expression: str, frame: pd.DataFrame):
    """The value of a check's test (pandas' expression syntax) over the columns of ``frame``: what
    ``frame.eval(expression, engine="python")`` gives, the same operators applied to the same column Series,
    without parsing the expression again each time (pandas' parse is most of its cost: about 2.5 ms a call).

    >>> f = pd.DataFrame({"p": [0.01, 0.2, float("nan")], "lo": [0.1, -0.1, 0.3], "word": ["rose", "", "rose"]})
    >>> expression_value("p < 0.05 and `lo` > 0 and not (word != 'rose')", f).tolist()
    [True, False, False]
    >>> expression_value("abs(lo) >= 0.1 | p != p", f).tolist()
    [True, True, True]
    """
    tree, names = _parsed(expression)
    return _value(tree, names, frame)


@dataclass(frozen=True)
class Claim:
    """One sentence a report may print, as data: what it says, what it rests on, what licenses it.

    ``kind`` names the template (``rose``, ``no_evidence``, ``differs_across_layers``, ...);
    ``where`` is ``headline``, ``finding``, ``methods`` or a section id; ``table`` and ``rows`` (values
    of its ``key`` column) are the cells it rests on; ``evidence`` holds those rows as the section had
    them in hand, and ``design`` the facts of the design it relies on (counts, runs present).
    ``requires`` are its preconditions (:class:`Check` s), computed from ``evidence`` and ``design``
    by :func:`evaluate` whenever they are read; ``because`` are reasons that hold by the design of the
    report and are shown, not tested. A claim is printed only when every check holds (:attr:`holds`).

    ``short`` is the claim in brief, for a report's first screen (:attr:`routestats.report.Report.answer`): the same
    verdict under the same checks, its numbers left to ``figure`` (the :class:`~routestats.report.Figure` that shows
    it) and to the full sentence. A ``qualifier`` is a headline claim that qualifies the answer (a confound such as
    mass moving off special tokens, a test that cannot reach alpha): its brief form joins the answer's sentence, never
    stands alone. ``verdicts`` are the per-row claims whose checks chose the words it prints (:func:`verdicts`).
    """

    kind: str
    sentence: str
    where: str = "finding"
    table: str = ""
    rows: tuple = ()
    key: str = "layer"
    requires: tuple[Check, ...] = ()
    because: tuple[str, ...] = ()
    evidence: pd.DataFrame | None = field(default=None, repr=False, compare=False)
    design: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    short: str = ""
    figure: Any = field(default=None, repr=False, compare=False)  # a routestats.report.Figure that shows it, or None
    qualifier: bool = False
    verdicts: tuple["Claim", ...] = field(default=(), repr=False, compare=False)  # :func:`verdicts`: its words' gates

    @functools.cached_property
    def checks(self) -> tuple[tuple[str, bool], ...]:
        """Each precondition's name and whether it holds, computed from the evidence the first time it is read (a
        claim is frozen and its evidence finished when it is built; a changed claim is a new one, as
        ``dataclasses.replace`` makes it). Once: the page, claims.csv, the answer and the findings all read it (a
        report evaluated its pandas checks about 190 times, 0.4 s CPU)."""
        return tuple((c.name, evaluate(c, self.evidence, self.design)) for c in self.requires)

    @property
    def holds(self) -> bool:
        return all(ok for _, ok in self.checks)


def verdicts(rows: pd.DataFrame, wordings: Mapping[str, Check], label: str, table: str = "",
             key: str = "layer") -> tuple[list[str], tuple[Claim, ...]]:
    """Each row's word, chosen by the checks of ``wordings`` (word -> the check that licenses it; the first that
    holds of the row, "" where none does), and every (row, word) built as a claim of its own, whatever the data
    (kind ``verdict``, where ``part``, sentence "``label`` in ``key`` k: word"): a builder that words its rows with
    these lets the checks choose each row's word, so every check is the gate of its word, and the verdicts withheld
    record which words each row was refused. Each check is evaluated once over all the rows, as :func:`evaluate`
    reads a one-row evidence (a row-wise test, no ``where``).

    >>> t = pd.DataFrame({"layer": [0, 1], "p": [0.01, 0.3]})
    >>> words, parts = verdicts(t, {"rose": Check("p < 0.05", "p < 0.05"), "includes": Check("p >= 0.05", "p >= 0.05")},
    ...                         "SFM", "effects")
    >>> words, [(c.sentence, c.holds) for c in parts][:2]
    (['rose', 'includes'], [('SFM in layer 0: rose', True), ('SFM in layer 0: includes', False)])
    """
    if any(c.on != "rows" or c.every != "all" or c.where for c in wordings.values()):
        raise ValueError("a verdict's check is a row-wise test of its one row (on rows, every all, no where)")
    holds = {w: row_verdicts(c, rows) if len(rows) else () for w, c in wordings.items()}
    words, parts = [], []
    for i in range(len(rows)):
        k, row = rows[key].iloc[i], rows.iloc[[i]]
        for w, c in wordings.items():
            part = Claim("verdict", f"{label} in {key} {k}: {w}", "part", table, (k,), key, (c,), evidence=row)
            part.__dict__["checks"] = ((c.name, bool(holds[w][i])),)  # what evaluate gives of the one row
            parts.append(part)
        words.append(next((w for w in wordings if holds[w][i]), ""))
    return words, tuple(parts)


def claims_frame(claims) -> pd.DataFrame:
    """The tidy frame of claims (what ``claims.csv`` holds): sentence, kind, where, table, key, rows,
    asserts (what it says of each row, :func:`asserted_rows`), checks (``name=True;...``, computed), printed,
    because (reasons, ``;``-separated) and short (the brief form, when the claim has one). A claim's
    :func:`verdicts` follow it (where ``part``): their sentences are never printed as such; a verdict whose check
    holds gave its row the word the claim prints.

    >>> import pandas as pd
    >>> ev = pd.DataFrame({"layer": [1], "p_holm": [0.01]})
    >>> f = claims_frame([Claim("rose", "SFM rose.", "headline", "effects", (1,),
    ...                         requires=(Check("p_holm < 0.05", "p_holm < 0.05"),), evidence=ev)])
    >>> f[["kind", "rows", "checks", "printed"]].values.tolist()
    [['rose', '1', 'p_holm < 0.05=True', True]]
    """
    every = (x for claim in claims for x in (claim, *claim.verdicts))
    return pd.DataFrame([{"sentence": c.sentence, "kind": c.kind, "where": c.where, "table": c.table, "key": c.key,
                          "rows": ",".join(str(r) for r in c.rows), "asserts": asserted_rows(c),
                          "checks": ";".join(f"{name}={ok}" for name, ok in c.checks),
                          "printed": c.holds and c.where != "part", "because": ";".join(c.because), "short": c.short}
                         for c in every], columns=["sentence", "kind", "where", "table", "key", "rows", "asserts",
                                                   "checks", "printed", "because", "short"])


def asserted_rows(claim: Claim) -> str:
    """What a claim asserts of each row it cites (``key=word;...``: rose, fell, excludes, includes, grew, ...),
    from its evidence's ``asserted`` column; empty when the claim asserts one thing of all its rows (its kind).

    >>> import pandas as pd
    >>> ev = pd.DataFrame({"layer": [0, 1], "asserted": ["rose", "includes"]})
    >>> asserted_rows(Claim("mixed", "...", evidence=ev))
    '0=rose;1=includes'
    """
    ev = claim.evidence
    if ev is None or "asserted" not in ev.columns or claim.key not in ev.columns:
        return ""
    return ";".join(f"{k}={a}" for k, a in zip(ev[claim.key], ev["asserted"]) if a)

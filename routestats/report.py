"""The one data model of every analysis: a frozen :class:`Report` of :class:`Section` s.

Every analysis (a pair, a study tree, a MoFA tree, a regime grid) returns a :class:`Report`.
A section holds :class:`Table` s (a frame plus how to show it) and :class:`Figure` s (a drawing
kind plus the finished frames it draws); ``Section.skipped`` says in words why a section has
nothing to show. :meth:`Report.tables` is derived from the sections, never written by hand.
Rendering (HTML, LaTeX, CSV, Markdown) lives in the top-level ``reports`` package, which imports
this module and never the other way round (``reports.write(report, out)``,
``reports.to_latex(report, name)``, ``reports.to_markdown(report)``); this module needs pandas only.

The number formats shared by the tables and by the generated sentences (findings, headlines), and the rule for a
p at its test's floor, come from :mod:`routestats.numbers` and are part of this module's names, so a sentence
quotes a number exactly as its table cell shows it.

Examples
--------
>>> import pandas as pd
>>> t = Table("effects", pd.DataFrame({"layer": [0, 1], "mean_diff": [0.1234, -0.05]}), "Paired effects.",
...           (Column("Layer", "layer", "int"), Column("Δ", "mean_diff")))
>>> rep = Report("demo", "one pair", (Section("effects", "Paired effects", tables=(t,)),
...                                   Section("words", "Word map", skipped="no example qualifies")))
>>> list(rep.tables()), rep.table("effects").caption
(['effects'], 'Paired effects.')
>>> rep.sections[1].skipped
'no example qualifies'
>>> fmt_p(0.00002), fmt_ci(0.11241, 0.1383), fmt_num(float("nan"))
('< 0.001', '[0.112, 0.138]', '–')
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping

import pandas as pd

from routestats.claim import claims_frame
from routestats.errors import IntegrityError, RoutestatsError
from routestats.moved import forward
from routestats.views import NOTEBOOK_VIEWS, plain_html  # noqa: F401  (public names of this module)
from routestats.numbers import (  # noqa: F401  (the number formats: part of this module's public names)
    DASH, FLOOR_TOLERANCE, at_floor, at_printed_floor, counted, floor_text, fmt_ci, fmt_int, fmt_num, fmt_p, fmt_sig,
    is_missing, pct,
)

if TYPE_CHECKING:
    from routestats.claim import Claim

__all__ = ["is_missing", "NOTEBOOK_VIEWS", "plain_html", "Column", "Table", "Figure", "Section", "Report", "section",
           "guarded", "fmt_num", "fmt_sig", "fmt_int",
           "fmt_p", "fmt_ci", "pct", "counted", "point_label", "DASH", "at_floor", "floor_text", "FLOOR_TOLERANCE",
           "at_printed_floor"]

COLUMN_KINDS = ("num", "int", "p", "sig", "ci", "range", "text")


def point_label(r) -> str:
    """'L2 E5 r17' for a row with layer, example and token (a bare operator file has layer -1).

    >>> point_label({"layer": 2, "example": 5, "token": 17}), point_label({"layer": -1})
    ('L2 E5 r17', 'operator file')
    """
    return f"L{int(r['layer'])} E{int(r['example'])} r{int(r['token'])}" if int(r.get("layer", -1)) >= 0 else "operator file"


@dataclass(frozen=True)
class Column:
    """One shown column: header, source column (or (low, high) for a CI / range), kind, digits."""

    header: str
    source: str | tuple[str, str]
    kind: str = "num"  # num, int, p, sig (significant digits), ci (low, high), range (first, last), text
    digits: int = 3
    floor: str | None = None  # p columns of a sign-flip test: the frame's column holding the smallest p it can give
    legend: str = ""  # what a terse header means, said under the table (HTML, Markdown) and on hover

    def __post_init__(self):
        if self.kind not in COLUMN_KINDS:
            raise ValueError(f"column kind {self.kind!r} is not one of {COLUMN_KINDS}")


@dataclass(frozen=True)
class Table:
    """A finished frame and how to show it. A table without ``columns`` is exported (CSV) only."""

    name: str
    frame: pd.DataFrame = field(repr=False)
    caption: str = ""
    columns: tuple[Column, ...] = ()
    bold_max: tuple[str, ...] = ()  # columns whose maximum is marked (within group_by)
    group_by: str | None = None
    notes: str = ""
    subject: str = ""  # user-supplied text appended to the LaTeX caption (run ids); escaped verbatim
    page_rows: tuple[int, ...] | None = None  # positions shown on the page (HTML, Markdown); None: all
    page_note: str = ""  # what the page leaves out, said under the table (CSV and LaTeX hold every row)

    @property
    def shown(self) -> bool:
        return bool(self.columns)

    @property
    def legend(self) -> str:
        """What the table's terse headers mean, in one line: its columns' legends ('' when none has one).

        >>> Table("t", pd.DataFrame({"a": [1]}), columns=(Column("d_sw", "a", "int", legend="switching directions"),
        ...                                                Column("Layer", "a", "int"))).legend
        'd_sw: switching directions.'
        """
        return "; ".join(f"{c.header}: {c.legend}" for c in self.columns if c.legend) + ("." if any(
            c.legend for c in self.columns) else "")

    def _repr_html_(self) -> str:  # Jupyter: the table as the report shows it
        return NOTEBOOK_VIEWS.get("table", plain_html)(self)


@dataclass(frozen=True)
class Figure:
    """A figure of kind ``kind`` (a key of the renderer's registry) drawn from finished ``frames``."""

    name: str
    kind: str
    frames: Mapping[str, Any] = field(default_factory=dict, repr=False)
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Section:
    """One titled part of a report; ``skipped`` says why it has nothing to show; ``claims`` are the
    sentences that rest on this section's own frames. A section function (:func:`section`) leaves ``id`` and
    ``title`` to its decorator."""

    id: str = ""
    title: str = ""
    tables: tuple[Table, ...] = ()
    figures: tuple[Figure, ...] = ()
    text: str = ""
    skipped: str = ""
    claims: tuple[Claim, ...] = ()


@dataclass(frozen=True, repr=False)
class Report:
    """Everything one analysis shows: sections, generated sentences, methods and provenance.

    :attr:`claims` are derived from the sections (each section's claims rest on its own frames) plus
    ``scope``, the report-wide claims its context states, ordered by ``claim_order`` (claim kinds in
    rank order; kinds it does not name follow in section order). :attr:`headline` and :attr:`findings`
    are the printed claims' words (claims whose preconditions fail are kept in ``claims`` but not
    printed). ``data`` holds frames that are inputs of figures or of further analysis but no table;
    ``glossary`` holds (term, meaning) pairs of the symbols its first screen uses (:attr:`terms`);
    ``facts`` holds descriptive scalars (counts, steps, ...) for the caller; ``parts`` holds
    sub-reports shown after this one (the per-pair parts of a study).
    """

    title: str
    subtitle: str
    sections: tuple[Section, ...]
    methods: str = ""
    provenance: Mapping[str, Any] = field(default_factory=dict, repr=False)
    data: Mapping[str, Any] = field(default_factory=dict, repr=False)
    facts: Mapping[str, Any] = field(default_factory=dict)
    parts: tuple["Report", ...] = ()
    scope: tuple[Claim, ...] = ()
    claim_order: tuple[str, ...] = ()
    glossary: tuple[tuple[str, str], ...] = ()  # (term, meaning) of the symbols the first screen uses

    @property
    def claims(self) -> tuple[Claim, ...]:
        """Every claim of this report (sections, then scope), in ``claim_order`` rank."""
        every = [c for s in self.sections for c in s.claims] + list(self.scope)
        rank = {k: i for i, k in enumerate(self.claim_order)}
        return tuple(sorted(every, key=lambda c: rank.get(c.kind, len(rank))))

    def _printed(self, where: str) -> tuple[str, ...]:
        return tuple(c.sentence for c in self.claims if c.where == where and c.holds)

    @property
    def headline(self) -> tuple[str, ...]:
        """The printed headline sentences: the answer first, then its scope and qualifications."""
        return self._printed("headline")

    @property
    def findings(self) -> tuple[str, ...]:
        """The printed per-layer (per-domain, per-point) sentences under the headline."""
        return self._printed("finding")

    @property
    def answer_claim(self) -> Claim | None:
        """The printed headline claim that answers the report's question: the first with a brief form that is not a
        qualifier."""
        return next((c for c in self.claims if c.where == "headline" and c.short and not c.qualifier and c.holds),
                    None)

    @property
    def answer(self) -> str:
        """The answer in one short sentence for the first screen: the brief form of :attr:`answer_claim`,
        with the brief forms of the printed headline claims that qualify it (confounds such as mass moving
        off special tokens) in the same sentence; '' when no headline claim has a brief form.

        >>> import pandas as pd
        >>> from routestats.claim import Check, Claim
        >>> ev = pd.DataFrame({"layer": [0], "p": [0.01]})
        >>> rose = Claim("rose", "SFM rose in layer 0 (Δ +0.1, p = 0.01).", "headline", evidence=ev,
        ...              requires=(Check("p < 0.05", "p < 0.05"),), short="SFM rose in layer 0 of 1.")
        >>> conf = Claim("unnamed_shift", "...", "headline", short="part of it is mass leaving special tokens",
        ...              qualifier=True)
        >>> Report("t", "s", (Section("e", "E", claims=(rose, conf)),)).answer
        'SFM rose in layer 0 of 1; part of it is mass leaving special tokens.'
        >>> Report("t", "s", (Section("e", "E", claims=(rose,)),), scope=()).answer_claim.kind
        'rose'
        """
        main = self.answer_claim
        if main is None:
            return ""
        more = [c.short.rstrip(".") for c in self.claims if c.where == "headline" and c.qualifier and c.short
                and c.holds]
        return "; ".join([main.short.rstrip("."), *more]) + "."

    @property
    def terms(self) -> str:
        """The glossary entries the first screen uses -- the answer, headline and findings -- in one line
        (:meth:`terms_in`).

        >>> g = (("λ_max", "the largest eigenvalue"), ("d_sw", "how many exceed 1"), ("τ_cert", "a severity"))
        >>> from routestats.claim import Claim
        >>> claim = Claim("c", "λ_max 15.1, d_sw 13.", "finding")
        >>> Report("t", "s", (Section("e", "E", claims=(claim,)),), glossary=g).terms
        'λ_max: the largest eigenvalue; d_sw: how many exceed 1.'
        """
        return self.terms_in(self.first_screen)

    @property
    def first_screen(self) -> str:
        """The words of the first screen: the answer, headline and findings."""
        return " ".join((self.answer, *self.headline, *self.findings))

    def terms_in(self, text: str) -> str:
        """The glossary entries whose term (before any parenthesis) ``text`` uses, in one line ('' when none).

        >>> Report("t", "s", (), glossary=(("SFM (same-field mass)", "a share"), ("Δ", "a difference"))).terms_in("SFM")
        'SFM (same-field mass): a share.'
        """
        used = [f"{t}: {m}" for t, m in self.used_terms(text)]
        return "; ".join(used) + ("." if used else "")

    def used_terms(self, text: str) -> tuple[tuple[str, str], ...]:
        """The (term, meaning) entries of the glossary whose term (before any parenthesis) ``text`` uses."""
        return tuple((t, m) for t, m in self.glossary if t.split(" (")[0] in text)

    def __repr__(self) -> str:  # a terminal's view: what it is and its answer, not every frame
        parts = f", {len(self.parts)} parts" if self.parts else ""
        return (f"<Report {self.title!r}: {len(self.sections)} sections, {len(self.tables())} tables{parts}"
                + (f"; {self.answer}" if self.answer else "") + ">")

    def _repr_html_(self) -> str:  # Jupyter: the first screen (answer, its figure, headline), findings, tables
        return NOTEBOOK_VIEWS.get("report", plain_html)(self)

    def claims_frame(self) -> pd.DataFrame:
        """Every claim of this report (not of its parts) as a tidy frame (see :func:`claims_frame`)."""
        return claims_frame(self.claims)

    def tables(self) -> dict[str, pd.DataFrame]:
        """Every table of this report (not of its parts) by name, in section order."""
        return {t.name: t.frame for s in self.sections for t in s.tables}

    def table(self, name: str) -> Table:
        """The :class:`Table` called ``name``; a clear error names the ones there are."""
        for s in self.sections:
            for t in s.tables:
                if t.name == name:
                    return t
        from routestats.table_names import unknown_table

        raise RoutestatsError(unknown_table(name, self.tables()))

    def frame(self, name: str) -> pd.DataFrame:
        """A table's frame, or a frame of ``data``."""
        if name in self.data:
            return self.data[name]
        return self.table(name).frame

    def section(self, id: str) -> Section:
        for s in self.sections:
            if s.id == id:
                return s
        raise RoutestatsError(f"this report has no section {id!r}")

    def all_reports(self) -> list["Report"]:
        """This report followed by its parts (depth first)."""
        out = [self]
        for p in self.parts:
            out += p.all_reports()
        return out

    def find_table(self, name: str) -> Table:
        """Table ``name`` of this report or, failing that, of a part (the first found, depth first);
        a clear error lists every table name there is."""
        for r in self.all_reports():
            if name in r.tables():
                return r.table(name)
        names = sorted({n for r in self.all_reports() for n in r.tables()})
        for r in self.all_reports():  # the section that would hold it, when it could not be computed: its reason
            for sec in r.sections:
                if sec.skipped.startswith("Not computed: ") and (name == sec.id or name.startswith(sec.id + "_")):
                    why = sec.skipped[len("Not computed: "):].rstrip(".")
                    raise RoutestatsError(f"no table {name!r}: its section ({sec.title}) was not computed: {why} "
                                          f"(this report has: {', '.join(names) or 'none'})")
        from routestats.table_names import unknown_table

        raise RoutestatsError(unknown_table(name, names))


def section(id: str, title: str):
    """Name a section function ``(ctx) -> Section | None`` (None: not applicable to this input); the section it
    returns gets this id and title unless it names others, so its body says them once, here.

    >>> @section("toy", "Toy section")
    ... def toy(ctx):
    ...     return Section(text="nothing yet")
    >>> s = toy(None)
    >>> s.id, s.title, toy.section_id
    ('toy', 'Toy section', 'toy')
    """

    def deco(fn):
        @functools.wraps(fn)
        def named(ctx):
            got = fn(ctx)
            return replace(got, id=id, title=title) if isinstance(got, Section) and not got.id else got

        named.section_id, named.section_title = id, title
        return named

    return deco


def guarded(fn, ctx) -> Section | None:
    """Run one section function ``fn(ctx)`` (named with :func:`section`); a :class:`RoutestatsError`
    inside it becomes the section with ``skipped="Not computed: <why>."`` (the other sections still
    stand), so no report hides a failed section; an :class:`~routestats.errors.IntegrityError` (a verified
    input changed under the analysis) ends the report instead, so nothing is published.

    >>> @section("x", "X")
    ... def broken(ctx):
    ...     raise RoutestatsError("no examples left")
    >>> guarded(broken, None).skipped
    'Not computed: no examples left.'
    """
    try:
        return fn(ctx)
    except IntegrityError:  # an input changed under the analysis: no section of it is published
        raise
    except RoutestatsError as exc:
        return Section(fn.section_id, fn.section_title, skipped=f"Not computed: {str(exc).rstrip('.')}.")


# the claim model (Claim, Check, evaluate, claims_frame, asserted_rows) lives in routestats.claim since 0.1.x; its old
# names here forward for one release, with a DeprecationWarning naming the new place
__getattr__ = forward(__name__, "routestats.claim")

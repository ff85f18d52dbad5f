"""The one build loop of every report kind: guarded sections, their claims, methods and provenance.

A report kind supplies a context (whatever its sections read, computed once: ``cached_property``)
and an ordered tuple of section functions ``(ctx) -> Section | None`` (named with
:func:`routestats.report.section`). :func:`build_report` runs each through
:func:`routestats.report.guarded` (a section that cannot be computed says why; the others stand),
drops those that do not apply (None), and returns the frozen :class:`~routestats.report.Report`
whose claims are the sections' own plus the context's ``scope`` claims, ranked by ``claim_order``.

Examples
--------
>>> import pandas as pd
>>> from routestats.claim import Claim
>>> from routestats.report import Section, Table, section
>>> @section("toy", "Toy")
... def toy(ctx):
...     t = pd.DataFrame({"layer": [0], "x": [ctx]})
...     return Section(tables=(Table("toy", t),), claims=(Claim("toy", f"x is {ctx}.", "headline", "toy", (0,), evidence=t),))
>>> rep = build_report(3, (toy,), title="T", subtitle="S")
>>> rep.headline, list(rep.tables())
(('x is 3.',), ['toy'])
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import replace
from typing import Any, Callable, Mapping

from routestats.claim import Claim
from routestats.report import Report, guarded

__all__ = ["build_report", "generated_now"]


def generated_now() -> str:
    """The time a report is generated, for its provenance (UTC, seconds)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def build_report(ctx, sections, *, title: str, subtitle: str, methods: str | Callable[[Report], str] = "",
                 provenance: Mapping[str, Any] | None = None, data: Mapping[str, Any] | None = None,
                 facts: Mapping[str, Any] | None = None, scope: tuple[Claim, ...] = (),
                 claim_order: tuple[str, ...] = (), glossary: tuple[tuple[str, str], ...] = ()) -> Report:
    """Run every section function over ``ctx`` and assemble the :class:`Report`.

    ``methods`` is the methods text, or a function of the finished sections' report that writes it
    (the pair report's protocol sentence names what its tables hold); ``scope`` are the report-wide
    claims of the context (its scope sentence), ranked with the sections' claims by ``claim_order``;
    ``glossary`` the (term, meaning) pairs of the symbols its first screen uses.
    """
    built = tuple(sec for fn in sections if (sec := guarded(fn, ctx)) is not None)
    for sec in built:  # a claim cites a table of its own section: a renamed table fails here, loudly
        names = {t.name for t in sec.tables}
        for c in sec.claims:
            if c.table and c.table not in names:
                raise ValueError(f"section {sec.id!r}: claim {c.kind!r} cites table {c.table!r}, which the section "
                                 f"does not hold (it holds: {', '.join(sorted(names)) or 'none'})")
    rep = Report(title=title, subtitle=subtitle, sections=built, provenance=dict(provenance or {}),
                 data=dict(data or {}), facts=dict(facts or {}), scope=tuple(scope), claim_order=tuple(claim_order),
                 glossary=tuple(glossary))
    return replace(rep, methods=methods(rep) if callable(methods) else methods)

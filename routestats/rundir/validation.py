"""The whole-run check behind :meth:`routestats.rundir.read.Run.validate`: the manifest, the file hashes,
the examples and their content hashes, each attention form's example ids and, where a step stores both
forms, the stored reductions against the reductions of the stored matrices."""

from __future__ import annotations

import numpy as np

from routestats.errors import RunFormatError
from routestats.rundir import schema as S
from routestats.rundir.reductions import reduce_queries

__all__ = ["validate_run", "check_forms_agree"]


def validate_run(run, deep: bool = True) -> list[str]:
    """Check ``run`` against the contract and return the list of checks passed (``deep``: file and content
    hashes and the agreement of the two attention forms too); the first failure raises
    :class:`~routestats.errors.RunFormatError`."""
    done = ["manifest"]
    if deep:
        for entry in run.manifest["files"]:
            run.verify(entry["path"])
        done.append(f"file hashes ({len(run.manifest['files'])} files)")
    df = run.examples()
    done.append(f"examples ({len(df)} rows)")
    if deep:
        for row in df.itertuples(index=False):
            if S.content_hash(row.tokens, row.field_ids) != row.content_sha256:
                raise RunFormatError(
                    f"{run.path / S.EXAMPLES}: column 'content_sha256' of example_id "
                    f"{row.example_id} does not match its tokens and field_ids"
                )
        done.append("content hashes")
    ids = set(df["example_id"].tolist())
    for step in run.attention_steps:
        for form in run.attention_forms(step):
            it = run.iter_attention(step) if form == S.FORM_MATRICES else run.iter_reductions(step)
            seen = {blk.example_id for blk in it}
            if seen != ids:
                missing = sorted(ids - seen)[:5]
                extra = sorted(seen - ids)[:5]
                raise RunFormatError(
                    f"{run.path / S.attention_file(step, form)}: example ids differ from "
                    f"{S.EXAMPLES} (missing {missing}, unknown {extra})"
                )
            done.append(f"attention step {step} {form}")
        if deep and set(S.ATTENTION_FORMS) <= set(run.attention_forms(step)):
            check_forms_agree(run, step)
            done.append(f"attention step {step}: reductions agree with matrices")
    for name, read in ((S.METRICS, run.metrics), (S.GRADIENTS, run.gradients), (S.LM_SCORES, run.lm_scores)):
        if run.has(name):
            read()
            done.append(name)
    return done


def check_forms_agree(run, step: int, atol: float = 1e-9) -> None:
    """Stored reductions equal the reductions of the stored matrices (within ``atol``)."""
    ex = run.examples(["example_id", "field_ids"])
    fields = dict(zip(ex["example_id"].tolist(), ex["field_ids"]))
    named = run.field_ids
    for m, r in zip(run.iter_attention(step), run.iter_reductions(step)):
        if m.example_id != r.example_id:
            raise RunFormatError(f"{run.path}: the two attention forms at step {step} list examples in a "
                                 f"different order ({m.example_id} vs {r.example_id})")
        want = reduce_queries(m.weights, np.asarray(fields[m.example_id]), named)
        for col in S.REDUCTION_COLUMNS:
            got = getattr(r, col)
            if got is None:
                continue
            err = np.abs(got - want[col].reshape(got.shape))
            if err.max(initial=0.0) > atol:
                raise RunFormatError(
                    f"{run.path / S.attention_file(step, S.FORM_REDUCTIONS)}: column {col!r} of example_id "
                    f"{r.example_id} differs from the stored matrices by {err.max():.3g} (> {atol:g})")

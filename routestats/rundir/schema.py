"""The run-directory contract: the single source of truth for what a run holds.

Every writer in the project (the PyTorch runners, the synthetic generator, third-party
adapters) writes through these names and schemas, and :mod:`routestats.rundir.read` validates
against them. The user-facing description lives in ``docs/run-format.md``; keep the two
in step and bump :data:`SCHEMA_VERSION` on any incompatible change.

A run directory::

    run.json                                   manifest, written last (atomically)
    examples.parquet                           one row per evaluated example
    attention/step=000500/matrices.parquet     full attention (form "matrices")
    attention/step=000500/reductions.parquet   per-query reductions (form "reductions")
    metrics.parquet                            per-step training / evaluation metrics
    gradients.parquet                          per-step x layer Q/K/V gradient norms
    lm_scores.parquet                          language-model scores per domain block
    checkpoints/step_0500.pt                   model states (runners only)
    operators/index.json, operators/L1-E0-r63.npz   regime-switching operators (added after training)

Examples
--------
>>> attention_file(500, FORM_MATRICES)
'attention/step=000500/matrices.parquet'
>>> sorted(EXAMPLES_SCHEMA.names)[:3]
['cap', 'content_sha256', 'example_id']
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa

SCHEMA_VERSION = "1.1"  # 1.1: the optional value_norms column of matrices.parquet (1.0 runs are read as before)
SUPPORTED_SCHEMA_VERSIONS = ("1.0", "1.1")

# ---------------------------------------------------------------- file names
MANIFEST = "run.json"
EXAMPLES = "examples.parquet"
ATTENTION_DIR = "attention"
METRICS = "metrics.parquet"
GRADIENTS = "gradients.parquet"
LM_SCORES = "lm_scores.parquet"
CHECKPOINT_DIR = "checkpoints"
OPERATOR_DIR = "operators"
OPERATOR_INDEX = "index.json"
OPERATOR_ARRAYS = ("J_T", "J_Q", "J_K")  # required in every operator file; the rest is optional

VERIFY_PART_BYTES = 8 << 20
"""A file of the run larger than this lists, besides its SHA-256, the SHA-256 of each consecutive piece of
this many bytes (``parts`` of its ``files`` entry): a reader that needs a few row groups of a large file
(the word map: one example of a 1 GB matrices file) verifies the pieces it reads, not the whole file."""

FORM_MATRICES = "matrices"
FORM_REDUCTIONS = "reductions"
ATTENTION_FORMS = (FORM_MATRICES, FORM_REDUCTIONS)
ATTENTION_DTYPES = ("float16", "float32")



def attention_file(step: int, form: str) -> str:
    """Relative path of the attention file for ``step`` in storage ``form``."""
    if form not in ATTENTION_FORMS:
        raise ValueError(f"unknown attention form {form!r}; expected one of {ATTENTION_FORMS}")
    return f"{ATTENTION_DIR}/step={int(step):06d}/{form}.parquet"


def checkpoint_file(step: int) -> str:
    """Relative path of the checkpoint written at ``step``."""
    return f"{CHECKPOINT_DIR}/step_{int(step):04d}.pt"


# ---------------------------------------------------------------- tolerances
#: Largest accepted |row sum - 1| of a softmax attention row, by storage dtype. float16
#: rounds each probability with relative error <= 2**-11, so a row of probabilities
#: summing to 1 sums to 1 +- 4.9e-4 after storage; float32 softmax rows carry ~L * 6e-8.
ROW_SUM_ATOL = {"float16": 2e-3, "float32": 1e-4, "float64": 1e-9}

#: Epsilon inside the logarithm of the attention entropy (METHODS 2.2).
ENTROPY_EPS = 1e-10

#: Head types; only softmax rows must sum to 1 (MoFA sigmoid rows need not); ``sink`` heads are
#: softmax heads with learned attention sinks (GPT-OSS): the sink logits take part in the softmax
#: but are no key, so a row sums to 1 - its sink mass, at most 1 (METHODS 3.2: sink mass).
HEAD_TYPES = ("softmax", "sigmoid", "sink")

# ---------------------------------------------------------------- schemas
EXAMPLES_SCHEMA = pa.schema(
    [
        pa.field("example_id", pa.int64(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("source_index", pa.int64(), nullable=False),
        pa.field("row_id", pa.string()),
        pa.field("label", pa.string()),
        pa.field("prepared_length", pa.int32(), nullable=False),
        pa.field("length", pa.int32(), nullable=False),
        pa.field("cap", pa.int32(), nullable=False),
        pa.field("field_ids", pa.list_(pa.int16()), nullable=False),
        pa.field("tokens", pa.list_(pa.string())),
        pa.field("word_ids", pa.list_(pa.int32())),
        pa.field("is_primary", pa.bool_(), nullable=False),
        pa.field("in_length_sample", pa.bool_(), nullable=False),
        pa.field("in_test_sample", pa.bool_(), nullable=False),
        pa.field("content_sha256", pa.string(), nullable=False),
    ]
)
"""``examples.parquet``. ``field_ids``, ``tokens`` and ``word_ids`` cover the evaluated
positions only (the first ``length`` = min(prepared_length, cap) non-padding positions);
``word_ids`` maps each position to a word group (field-start tokens are their own group),
-1 where unknown. ``content_sha256`` is :func:`content_hash` of tokens and field ids."""


def attention_matrices_schema(dtype: str = "float16", value_norms: bool = False) -> pa.Schema:
    """Schema of ``matrices.parquet``: one row per example x layer x head.

    ``weights`` is the ``n x n`` matrix over the example's evaluated positions, row-major
    (row = query, column = key), stored as ``dtype``. The optional ``value_norms`` (schema 1.1)
    holds, per key j, the norm of the vector the head transports from it, ||f_h(x_j)|| =
    ||(x_j W_V^h + b_V^h) W_O^h|| (Kobayashi et al. 2020; METHODS III 3.5), as float32;
    ``value_norms=True`` gives the schema with it (readers check the column when present).
    """
    if dtype not in ATTENTION_DTYPES:
        raise ValueError(f"unknown attention dtype {dtype!r}; expected one of {ATTENTION_DTYPES}")
    value = pa.float16() if dtype == "float16" else pa.float32()
    return pa.schema(
        [
            pa.field("example_id", pa.int64(), nullable=False),
            pa.field("layer", pa.int16(), nullable=False),
            pa.field("head", pa.int16(), nullable=False),
            pa.field("head_type", pa.string(), nullable=False),
            pa.field("n", pa.int32(), nullable=False),
            pa.field("weights", pa.list_(value), nullable=False),
            *([pa.field("value_norms", pa.list_(pa.float32()), nullable=False)] if value_norms else []),
        ]
    )


MATRICES_REQUIRED = ["example_id", "layer", "head", "head_type", "n", "weights"]


REDUCTIONS_SCHEMA = pa.schema(
    [
        pa.field("example_id", pa.int64(), nullable=False),
        pa.field("layer", pa.int16(), nullable=False),
        pa.field("head", pa.int16(), nullable=False),
        pa.field("head_type", pa.string(), nullable=False),
        pa.field("n", pa.int32(), nullable=False),
        pa.field("row_mass", pa.list_(pa.float64()), nullable=False),
        pa.field("entropy", pa.list_(pa.float64()), nullable=False),
        pa.field("entropy_rownorm", pa.list_(pa.float64()), nullable=False),
        pa.field("field_mass", pa.list_(pa.float64()), nullable=False),
        pa.field("first_mass", pa.list_(pa.float64()), nullable=True),  # optional: absent in runs before 2026-12
    ]
)
REDUCTION_COLUMNS = tuple(f.name for f in REDUCTIONS_SCHEMA if pa.types.is_list(f.type))
"""The per-query reductions (the list columns of ``reductions.parquet``, in its order; derived from the
schema): the one vocabulary every writer, reader and metric imports."""
REDUCTIONS_REQUIRED = [f.name for f in REDUCTIONS_SCHEMA if f.name != "first_mass"]
"""``reductions.parquet``: one row per example x layer x head with per-query lists of
length ``n``: total row mass, entropy over all keys, entropy of the row renormalised to
mass 1, and ``field_mass`` (n x F, row-major) = attention mass on valid keys of each
named field, fields in ascending id order (the manifest's ``fields.named``)."""

METRICS_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("phase", pa.string(), nullable=False),
        pa.field("loss", pa.float64()),
        pa.field("accuracy", pa.float64()),
        pa.field("lr", pa.float64()),
        pa.field("grad_norm", pa.float64()),
        pa.field("examples_per_sec", pa.float64()),
        pa.field("elapsed_seconds", pa.float64()),
    ]
)
"""``metrics.parquet``: phase is ``train`` or ``eval``; accuracy only for eval rows,
grad_norm (pre-clip global norm) only for train rows."""

GRADIENTS_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("layer", pa.int16(), nullable=False),
        pa.field("component", pa.string(), nullable=False),
        pa.field("norm", pa.float64(), nullable=False),
    ]
)
"""``gradients.parquet``: Frobenius norm of the weight gradient of component q, k or v
(weights only) after accumulation and before clipping."""

LM_SCORES_SCHEMA = pa.schema(
    [
        pa.field("domain", pa.string(), nullable=False),
        pa.field("example_id", pa.int64(), nullable=False),
        pa.field("sum_nll", pa.float64(), nullable=False),
        pa.field("n_tokens", pa.int64(), nullable=False),
    ]
)
"""``lm_scores.parquet``: summed next-token NLL (nats) and predicted-token count per block."""

TABLE_SCHEMAS = {
    EXAMPLES: EXAMPLES_SCHEMA,
    METRICS: METRICS_SCHEMA,
    GRADIENTS: GRADIENTS_SCHEMA,
    LM_SCORES: LM_SCORES_SCHEMA,
}

# ---------------------------------------------------------------- manifest
MANIFEST_REQUIRED = {
    "schema_version": str,
    "run_id": str,
    "study": str,
    "factors": dict,
    "init_id": str,
    "data_order_id": str,
    "fields": dict,
    "attention": dict,
    "files": list,
    "created": str,
}
"""Required manifest keys and their JSON types. ``seed`` is required too (int or null).

Optional keys: ``model``, ``training``, ``dataset``, ``evaluation``, ``software``,
``git_commit``, ``pairing`` (evidence such as first-batch hashes), ``device``, ``timing``,
``condition``, ``parent_run_id`` (test-sample runs), ``notes``.

``fields`` = ``{"named": {"3": "content", "4": "title"}, "mask_id": 5, "vocab_size": 6}``;
``attention`` = ``{"dtype": "float16", "steps": {"1": ["reductions"], "500": ["matrices", "reductions"]}}``
(forms stored at each step);
``files`` = ``[{"path": "examples.parquet", "sha256": "...", "bytes": 123}, ...]``; a file larger than
:data:`VERIFY_PART_BYTES` adds ``"parts": {"bytes": 8388608, "sha256": ["...", ...]}`` (one digest per piece).
"""

#: Parquet writer options used for every table (explicit, so files are reproducible).
PARQUET_OPTIONS = {"compression": "zstd", "use_dictionary": False, "write_statistics": True}


def float_list_columns(schema: pa.Schema) -> list[str]:
    """Leaf paths of float list columns, written with BYTE_STREAM_SPLIT encoding.

    Measured on a tiny-preset dump: 10 % smaller matrices and 14 % smaller reductions
    than plain zstd, and faster to decode.

    >>> float_list_columns(attention_matrices_schema("float16"))
    ['weights.list.element']
    """
    return [
        f"{f.name}.list.element"
        for f in schema
        if pa.types.is_list(f.type) and pa.types.is_floating(f.type.value_type)
    ]


def content_hash(tokens, field_ids) -> str:
    """SHA-256 identifying an evaluated example by its tokens and field ids.

    Pairing compares these across runs: two runs that evaluated "example 7" on different
    text cannot be paired.

    >>> content_hash(["a", "b"], [3, 4])[:12]
    'a8a9c2a26102'
    """
    h = hashlib.sha256()
    for t in tokens if tokens is not None else ():
        h.update(str(t).encode("utf-8"))
        h.update(b"\x1f")
    h.update(b"\x1e")
    h.update(np.asarray(field_ids, dtype=np.int64).tobytes())
    return h.hexdigest()


def named_field_ids(fields: dict) -> np.ndarray:
    """Sorted named field ids from a manifest's ``fields`` entry.

    >>> named_field_ids({"named": {"4": "title", "3": "content"}, "mask_id": 5})
    array([3, 4])
    """
    return np.array(sorted(int(k) for k in fields["named"]), dtype=np.int64)

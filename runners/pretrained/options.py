"""How each record is captured: one frozen :class:`CaptureOptions`, checked once where it is made and carried
unchanged from the command line (``python -m runners capture``) through the shards to the run writer.

>>> o = CaptureOptions.from_text(fields="title, content", forms="reductions,matrices", layers="5,0,5", cap=32)
>>> o.fields, o.forms, o.layers, o.cap
(('title', 'content'), ('reductions', 'matrices'), (0, 5), 32)
>>> CaptureOptions(dtype="float64")
Traceback (most recent call last):
...
routestats.errors.RoutestatsError: --dtype must be float16 or float32, got 'float64'
>>> with_options(None, {"cap": 16}).cap
16
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from routestats.errors import RoutestatsError
from routestats.rundir import schema as S

from runners.pretrained.fielding import POLICIES, SPECIAL_POLICIES

__all__ = ["ATTENTION_PATHS", "KERNEL_DTYPES", "PADDINGS", "CaptureOptions", "with_options", "parse_indices"]

ATTENTION_PATHS = ("auto", "chunked", "eager", "fused")
KERNEL_DTYPES = ("model", "float64", "float32")  # the fused kernel's arithmetic (carried as runners.pretrained.seam.Pass.kernel)
PADDINGS = ("none", "longest")


def parse_indices(text: str | None, option: str) -> list[int] | None:
    """``"0,1,5"`` -> [0, 1, 5] (None for no option); anything else is refused in one line.

    >>> parse_indices("5, 0", "--layers")
    [0, 5]
    """
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise RoutestatsError(f"{option} {text!r}: expected whole numbers separated by commas, e.g. 0,1,5")
    return sorted(set(int(p) for p in parts))


@dataclass(frozen=True)
class CaptureOptions:
    """The options of one capture, each named as its command-line option.

    ``fields`` picks and orders the records' fields (None: the first record's order); ``cap``, ``special_tokens``
    and ``truncation`` say how a record becomes the model's input; ``layers`` (None: all) and ``forms``
    (``reductions`` and/or ``matrices``) what is stored, in ``dtype``; ``batch_size``, ``padding`` and ``device``
    how forwards run; ``attention`` (auto, chunked, eager, fused) and ``attention_mb`` how each layer's attention
    is computed (:func:`runners.pretrained.capture.choose_attention`), ``kernel_dtype`` the fused kernel's
    arithmetic (model, the default: the model's own precision, float32 for float32 weights, held within twice the
    model's own eager gap to the float64 reference; float64: within 1e-6 of that reference);
    ``device_reductions`` (None: on any device
    but the CPU, with reductions alone) reduces on the device; ``study`` is the runs' study name.
    """

    fields: tuple[str, ...] | None = None
    cap: int = 128
    special_tokens: str = "unnamed"
    truncation: str = "only-last"
    layers: tuple[int, ...] | None = None
    forms: tuple[str, ...] = (S.FORM_REDUCTIONS,)
    dtype: str = "float32"
    batch_size: int = 8
    padding: str = "none"
    device: str = "cpu"
    attention: str = "auto"
    attention_mb: float = 256.0
    kernel_dtype: str = "model"
    device_reductions: bool | None = None
    study: str = "capture"

    def __post_init__(self) -> None:
        put = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 -- normalised once, here
        put("fields", None if self.fields is None else tuple(str(f) for f in self.fields))
        put("layers", None if self.layers is None else tuple(sorted(set(int(x) for x in self.layers))))
        put("forms", tuple(self.forms))
        put("device", str(self.device))
        bad = [f for f in self.forms if f not in S.ATTENTION_FORMS] or ([] if self.forms else ["(none)"])
        if bad:
            raise RoutestatsError(f"--forms {','.join(self.forms)!r}: expected reductions and/or matrices")
        if self.dtype not in S.ATTENTION_DTYPES:
            raise RoutestatsError(f"--dtype must be float16 or float32, got {self.dtype!r}")
        if self.attention not in ATTENTION_PATHS:
            raise RoutestatsError(f"--attention must be one of {', '.join(ATTENTION_PATHS)}, got {self.attention!r}")
        if not 0 < self.attention_mb < 1 << 20:
            raise RoutestatsError(f"--attention-mb must be a positive number of MB, got {self.attention_mb}")
        if self.kernel_dtype not in KERNEL_DTYPES:
            raise RoutestatsError(f"--kernel-dtype must be model, float64 or float32, got {self.kernel_dtype!r}")
        if self.kernel_dtype not in ("model", "float64") and self.attention not in ("auto", "fused"):
            raise RoutestatsError(f"--kernel-dtype {self.kernel_dtype} sets the fused path's arithmetic; "
                                  f"--attention {self.attention} has no fused kernel")
        if self.attention in ("chunked", "fused") and S.FORM_MATRICES in self.forms:
            raise RoutestatsError(f"--attention {self.attention} keeps per-query reductions only; store "
                                  "--forms reductions")
        self._check_input_options()

    def _check_input_options(self) -> None:
        if self.truncation not in POLICIES:
            raise RoutestatsError(f"--truncation must be one of {', '.join(POLICIES)}, got {self.truncation!r}")
        if self.special_tokens not in SPECIAL_POLICIES:
            raise RoutestatsError(f"--special-tokens must be unnamed or attach, got {self.special_tokens!r}")
        if isinstance(self.cap, bool) or not isinstance(self.cap, int) or self.cap < 2:
            raise RoutestatsError(f"--cap must be a whole number of at least 2, got {self.cap}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise RoutestatsError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.padding not in PADDINGS:
            raise RoutestatsError(f"--padding must be none or longest, got {self.padding!r}")

    @classmethod
    def from_text(cls, *, fields: str | None = None, forms: str = S.FORM_REDUCTIONS, layers: str | None = None,
                  **rest) -> "CaptureOptions":
        """The options as the command line spells them: comma-separated ``fields``, ``forms`` and ``layers``."""
        names = None if fields is None else tuple(f.strip() for f in fields.split(",") if f.strip())
        return cls(fields=names, forms=tuple(f.strip() for f in forms.split(",") if f.strip()),
                   layers=parse_indices(layers, "--layers"), **rest)

    def identity(self) -> dict:
        """The options as JSON values, for what a shard folder must prove (``device`` aside: where a shard ran
        does not change what it holds)."""
        out = dataclasses.asdict(self)
        out.pop("device")
        return {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(out.items())}


def with_options(options: CaptureOptions | None, overrides: Mapping) -> CaptureOptions:
    """``options`` (default: the defaults) with ``overrides`` (option name -> value) put in; an unknown name is a
    TypeError, as for any keyword argument."""
    base = options or CaptureOptions()
    known = {f.name for f in dataclasses.fields(CaptureOptions)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"unknown capture option(s): {', '.join(unknown)}")
    return dataclasses.replace(base, **overrides) if overrides else base


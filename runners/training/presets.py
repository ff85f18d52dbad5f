"""Model and training presets, and the SAAB condition vocabulary.

``paper`` is the published recipe (GPU); ``tiny`` trains a full baseline + SAAB pair with
dumps in minutes on 2 CPU cores; ``--depth`` varies the number of layers of either.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace


@dataclass(frozen=True)
class TrainConfig:
    max_steps: int = 500
    microbatch_size: int = 64
    grad_accum: int = 8
    learning_rate: float = 1e-4
    lr_schedule: str = "linear_warmup_cosine"
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = 1.0
    mask_probability: float = 0.15
    checkpoint_steps: tuple[int, ...] = (1, 10, 50, 100, 200, 300, 500)
    eval_steps: tuple[int, ...] = ()  # full-validation loss/accuracy; the final step always
    eval_examples: int = 64  # first N validation records dumped at every checkpoint step
    length_sample: int = 0  # plus a reservoir sample (Algorithm R) of this many validation records
    sample_seed: int = 1001
    eval_batch_size: int = 16
    eval_cap: int = 256
    dump_dtype: str = "float16"
    final_forms: tuple[str, ...] = ("matrices", "reductions")  # attention forms at the final step
    trajectory_forms: tuple[str, ...] = ("reductions",)  # at the other checkpoint steps
    log_gradients: bool = True

    def to_dict(self) -> dict:
        d = asdict(self)
        d["betas"] = list(self.betas)
        d["checkpoint_steps"] = list(self.checkpoint_steps)
        d["eval_steps"] = list(self.eval_steps)
        d["final_forms"] = list(self.final_forms)
        d["trajectory_forms"] = list(self.trajectory_forms)
        return d


@dataclass(frozen=True)
class Preset:
    name: str
    model: dict
    train: TrainConfig
    vocab_size: int
    max_length: int | None = None  # None: the data set's cap
    depth_steps: dict = field(default_factory=dict)


PRESETS = {
    "paper": Preset(
        "paper",
        dict(d_model=768, num_layers=4, num_heads=6, ff_dim=3072, dropout=0.2, scale_embeddings=True),
        TrainConfig(),
        vocab_size=30_000,
        depth_steps={6: 750, 8: 1000, 12: 1500},
    ),
    "tiny": Preset(
        "tiny",
        dict(d_model=128, num_layers=4, num_heads=4, ff_dim=512, dropout=0.1, scale_embeddings=True),
        TrainConfig(microbatch_size=16, grad_accum=1, learning_rate=5e-4, eval_cap=64, eval_batch_size=16),
        vocab_size=2000,
        max_length=64,
    ),
    "smoke": Preset(
        "smoke",
        dict(d_model=32, num_layers=2, num_heads=4, ff_dim=64, dropout=0.0, scale_embeddings=True),
        TrainConfig(max_steps=20, microbatch_size=4, grad_accum=2, learning_rate=1e-3, warmup_steps=2,
                    checkpoint_steps=(1, 10, 20), eval_examples=8, eval_batch_size=4, eval_cap=32),
        vocab_size=300,
        max_length=32,
    ),
}


def recipe_of(preset: Preset) -> dict:
    """The preset's own recipe length at this depth (what ``--max-steps`` may shorten), for the run's manifest: a
    report says when its runs stopped short of it.

    >>> recipe_of(get_preset("tiny", max_steps=20)), recipe_of(get_preset("paper", depth=8))
    ({'preset': 'tiny', 'max_steps': 500}, {'preset': 'paper', 'max_steps': 1000})
    """
    base = PRESETS.get(preset.name)
    if base is None:  # a preset built by hand: no recipe to fall short of
        return {}
    depth = preset.model.get("num_layers")
    return {"preset": preset.name, "max_steps": int(base.depth_steps.get(depth, base.train.max_steps))}


def get_preset(name: str, depth: int | None = None, max_steps: int | None = None,
               checkpoint_steps=None) -> Preset:
    """A preset, optionally at another depth (paper depth runs use 750/1,000/1,500 steps)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
    p = PRESETS[name]
    model = dict(p.model)
    train = p.train
    if depth is not None and depth != model["num_layers"]:
        model["num_layers"] = depth
        if depth in p.depth_steps:
            train = replace(train, max_steps=p.depth_steps[depth])
    if max_steps is not None:
        train = replace(train, max_steps=max_steps)
    if checkpoint_steps is not None:
        train = replace(train, checkpoint_steps=tuple(sorted(set(int(s) for s in checkpoint_steps))))
    if train.max_steps not in train.checkpoint_steps:
        train = replace(train, checkpoint_steps=tuple(sorted({*(s for s in train.checkpoint_steps if s < train.max_steps),
                                                              train.max_steps})))
    else:
        train = replace(train, checkpoint_steps=tuple(s for s in train.checkpoint_steps if s <= train.max_steps))
    return replace(p, model=model, train=train)


@dataclass(frozen=True)
class Condition:
    """One trained variant of a paired study."""

    name: str
    variant: str = "baseline"
    field_weight: float = 1.0
    layer_mask: tuple[float, ...] | None = None
    shuffled: bool = False
    bias_off: bool = False  # not trained: the ``saab`` run's final weights evaluated without the bias

    def factors(self) -> dict:
        if self.bias_off:
            return {"variant": "saab_bias_off", "eval_bias": "off"}
        if self.variant == "baseline":
            return {"variant": "baseline", "w_f": 0.0, "bias_layers": "none", "shuffled": False}
        layers = "all" if self.layer_mask is None else ",".join(f"{m:g}" for m in self.layer_mask)
        return {"variant": "saab_shuffled" if self.shuffled else "saab", "w_f": self.field_weight,
                "bias_layers": layers, "shuffled": self.shuffled}

    def model_overrides(self) -> dict:
        return {
            "variant": self.variant,
            "saab_field_weight": self.field_weight,
            "saab_layer_mask": None if self.layer_mask is None else list(self.layer_mask),
            "saab_shuffle_bias": self.shuffled,
        }


def parse_condition(text: str, num_layers: int) -> Condition:
    """Parse ``baseline``, ``saab``, ``wf=0.5``, ``last-only``, ``not-last``, ``layers=0,0,0,1``, ``shuffled``
    or ``bias-off`` (no training: the ``saab`` run of the same seed evaluated with its bias removed).

    >>> parse_condition("wf=0.5", 4)
    Condition(name='saab-wf0.5', variant='saab', field_weight=0.5, layer_mask=None, shuffled=False, bias_off=False)
    >>> parse_condition("last-only", 4).layer_mask
    (0.0, 0.0, 0.0, 1.0)
    >>> parse_condition("bias-off", 4).name
    'saab-bias-off'
    """
    t = text.strip()
    if t == "baseline":
        return Condition("baseline")
    if t == "saab":
        return Condition("saab", "saab")
    if t == "shuffled":
        return Condition("saab-shuffled", "saab", shuffled=True)
    if t == "bias-off":
        return Condition("saab-bias-off", "saab", bias_off=True)
    if t.startswith("wf="):
        w = float(t[3:])
        return Condition(f"saab-wf{w:g}", "saab", field_weight=w)
    if t == "last-only":
        m = tuple([0.0] * (num_layers - 1) + [1.0])
        return Condition("saab-lastonly", "saab", layer_mask=m)
    if t == "not-last":
        m = tuple([1.0] * (num_layers - 1) + [0.0])
        return Condition("saab-notlast", "saab", layer_mask=m)
    if t.startswith("layers="):
        m = tuple(float(x) for x in t[7:].split(","))
        if len(m) != num_layers:
            raise ValueError(f"{t}: {len(m)} multipliers for {num_layers} layers")
        return Condition("saab-layers" + "".join(f"{x:g}" for x in m), "saab", layer_mask=m)
    raise ValueError(f"unknown condition {text!r}")

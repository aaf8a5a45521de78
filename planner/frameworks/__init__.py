"""Everything a framework is, in one place: its releases, its profiles and its words.

* ``releases``: ``--framework RELEASE`` names (framework + release -> profile, torchtitan export release);
* ``profiles``: what a framework release fixes about how a layout runs, with sources (validate uses them);
* ``table``: ``Row`` / ``Table``, one framework's words for planner's options, read both ways;
* ``megatron`` (Megatron-LM / Megatron-Core), ``bridge`` (NeMo 2 / Megatron-Bridge: renames of the
  Megatron table), ``deepspeed``, ``torchtitan``, ``torchrun`` (what the launchers carry).

The exporters (``planner.export``) write through these tables and the launch readers
(``planner.launch``) read through them; neither imports the other.
"""

from __future__ import annotations

_RELEASE_NAMES = ("RELEASES", "RELEASES_BY_NAME", "Release", "FrameworkSettings", "get_release", "framework_settings",
                  "apply_framework", "catalog_rows", "format_catalog")


def window_text(model) -> str:
    """A ModelSpec's sliding window in words, as the exporters' refusals and the readers' notes say it
    ("" without one)."""
    if model.sliding_window is None:
        return ""
    every = model.full_attention_every
    where = (f"on {model.windowed_layers} of {model.num_layers} layers (full attention every {every})" if every
             else "on every layer")
    return f"a {model.sliding_window}-key sliding window {where}"


def __getattr__(name: str):
    # ``from planner.frameworks import framework_settings`` (the releases) without loading them for
    # every import of a table.
    if name in _RELEASE_NAMES:
        from planner.frameworks import releases

        return getattr(releases, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

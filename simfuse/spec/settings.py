"""Run settings that belong to one workload kind (``--set key=value`` on ``run`` / ``sweep``, the API's
keyword arguments).

A workload that reads settings of its own declares them as a frozen dataclass whose fields carry
:func:`setting` metadata, and registers it with :func:`register_settings` (the workload registry does this for a
:class:`~simfuse.workloads.base.Workload` with a ``settings`` class).  :func:`simfuse.fused.knobs.parse_execution`
then accepts its keys beside the execution settings and fused knobs, validates them by the same metadata and
keeps the values on ``ExecutionSpec.settings``; a run of another kind refuses them (the field's ``elsewhere``
message).  Registered classes must be importable where ``parse_execution`` runs (the built-in DLRM settings live
in :mod:`simfuse.spec.workload`).
"""

from __future__ import annotations

import dataclasses


def setting(help_text: str, *, default=None, choices=None, minimum=None, maximum=None, optional: bool = False,
            flag: str | None = None, elsewhere: str | None = None):
    """A settings field: its help text and bounds (validated as every ``--set`` key is), ``flag``: the command
    line's spelling where it has one (``--global-batch / global_batch``), ``elsewhere``: what a run of another
    workload kind says when the setting is given (``{kind}`` is replaced by that kind)."""
    return dataclasses.field(default=default, metadata={
        "help": help_text, "choices": choices, "min": minimum, "max": maximum, "optional": optional,
        "flag": flag, "elsewhere": elsewhere})


#: workload kind -> its settings dataclass, in registration order
_SETTINGS: dict[str, type] = {}


def register_settings(kind: str, cls: type) -> type:
    """Make ``cls``'s fields settable for runs of ``kind`` (a frozen dataclass of :func:`setting` fields).  A key
    another kind already declares is refused (one key, one meaning)."""
    mine = {f.name for f in dataclasses.fields(cls)}
    for other_kind, other in _SETTINGS.items():
        if other_kind != kind and (clash := mine & {f.name for f in dataclasses.fields(other)}):
            raise ValueError(f"settings {sorted(clash)} of {kind!r} are already declared by {other_kind!r}")
    _SETTINGS[kind] = cls
    return cls


def settings_classes() -> dict[str, type]:
    """Every registered workload kind with settings -> its settings dataclass."""
    return dict(_SETTINGS)


def settings_owner(key: str) -> tuple[str, type] | None:
    """``(kind, settings class)`` declaring ``key``, or None."""
    for kind, cls in _SETTINGS.items():
        if key in {f.name for f in dataclasses.fields(cls)}:
            return kind, cls
    return None


def given_settings(settings) -> list[tuple[str, object, dataclasses.Field]]:
    """``(kind, value, field)`` of every setting in ``settings`` (instances of registered classes) that differs
    from its default, in declaration order."""
    out = []
    for obj in settings:
        kind = next((k for k, c in _SETTINGS.items() if isinstance(obj, c)), type(obj).__name__)
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if v != f.default:
                out.append((kind, v, f))
    return out

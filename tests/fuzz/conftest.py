"""Shared helpers of the hostile-input suite: valid inputs to mutate and a runner of ``simfuse.cli.main``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TOPO = ROOT / "topologies" / "h200_nvl8_ib_ndr.yaml"
MODEL = ROOT / "models" / "dlrm_synthetic.yaml"
PROFILE = ROOT / "profiles" / "h200_calibration.yaml"
HELDOUT = ROOT / "experiments" / "results" / "h200_kernel_heldout.csv"


def topo_dict() -> dict:
    d = yaml.safe_load(TOPO.read_text())
    d["calibration"] = str(PROFILE)
    return d


def model_dict() -> dict:
    return yaml.safe_load(MODEL.read_text())


def snapshot(root: Path) -> set[str]:
    """Every path under ``root`` (files, directories, links), relative."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            out.add(os.path.relpath(os.path.join(dirpath, n), root))
    return out


def run_main(argv: list[str], capsys) -> tuple[int, str, str]:
    from simfuse.cli import main

    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse errors
        rc = exc.code if isinstance(exc.code, int) else 1
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.fixture
def inputs(tmp_path):
    """A directory with a valid topology (absolute calibration path), model and held-out CSV."""
    d = tmp_path / "inp"
    d.mkdir()
    (d / "topo.yaml").write_text(yaml.safe_dump(topo_dict(), sort_keys=False))
    (d / "model.yaml").write_text(MODEL.read_text())
    (d / "held.csv").write_text("\n".join(HELDOUT.read_text().splitlines()[:3]) + "\n")
    return d

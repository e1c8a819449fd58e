"""The README's headline table and docs/results.md's tables are exactly what experiments/scaling/headline.py makes of the
committed CSVs (a result quoted in a doc is a result in the repository)."""

import subprocess
import sys

import pandas as pd
import pytest


def _headline(root):
    sys.path.insert(0, str(root / "experiments" / "scaling"))
    import headline

    return headline


def _block(text: str, name: str) -> str:
    start, end = f"<!-- {name}:start -->\n", f"<!-- {name}:end -->"
    assert start in text and end in text, name
    return text.split(start, 1)[1].split(end, 1)[0]


def test_readme_headline_is_the_committed_csv(root):
    h = _headline(root)
    proj = root / "experiments/results/dlrm_projection"
    assert _block((root / "README.md").read_text(), "headline") == h.block(proj)
    t = pd.read_csv(proj / "projection.csv")
    # both GPUs under both scalings, each GPU at the same node counts, with a band around each point
    assert set(t["gpu"]) == {"H100", "H200"} and set(t["scaling"]) == {"strong", "weak"}
    assert t.groupby(["scaling", "gpu"])["nodes"].apply(frozenset).groupby(level=0).nunique().max() == 1
    assert (t["speedup_p10"] <= t["speedup_p90"]).all()
    assert ((t["speedup"] - t["baseline_ms"] / t["fused_ms"]).abs() < 1e-9).all()


def test_results_doc_blocks_are_the_committed_csvs(root):
    h = _headline(root)
    text = (root / "docs/results.md").read_text()
    blocks = h.results_blocks(root)
    assert {"headline", "projection", "waterfall", "transport", "hugectr"} <= set(blocks)
    for name, body in blocks.items():
        assert _block(text, name) == body, name


@pytest.mark.parametrize("args, needle", [(["--dir", "/nonexistent_dir"], "--dir"),
                                          (["--readme", "/nonexistent.md"], "--readme"),
                                          (["--results", "/nonexistent.md"], "--results"),
                                          (["--readme", "PLAIN"], "headline:start")])
def test_headline_bad_arguments_exit_2_without_traceback(root, tmp_path, args, needle):
    plain = tmp_path / "plain.md"
    plain.write_text("no generated block\n")
    args = [str(plain) if a == "PLAIN" else a for a in args]
    r = subprocess.run([sys.executable, "experiments/scaling/headline.py", *args], capture_output=True, text=True,
                       cwd=root, timeout=120)
    assert r.returncode == 2 and needle in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert plain.read_text() == "no generated block\n" and sorted(tmp_path.iterdir()) == [plain]

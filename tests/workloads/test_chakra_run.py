"""``simfuse run --export-chakra`` then ``simfuse run --chakra``: the same graph in both directions gives the
same iteration time; bad combinations of arguments exit 2."""

import json

from simfuse.cli import main


def _run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out


def test_export_then_import_gives_the_same_iteration(tmp_path, capsys, root):
    topo = str(root / "topologies" / "h200_nvl8_ib_ndr.yaml")
    et = tmp_path / "et"
    rc, out = _run(capsys, "run", "--model", str(root / "models" / "dlrm_synthetic.yaml"), "--topology", topo,
                   "--nodes", "1", "--gpus-per-node", "4", "--mode", "baseline", "--export-chakra", str(et),
                   "--format", "json")
    assert rc == 0, out.err
    lines = out.out.strip().splitlines()
    exported = json.loads(lines[-1])["rows"][0]["iteration_time_s"]
    assert {p.name for p in et.iterdir()} == {f"dlrm_synthetic.{r}.et" for r in range(4)} | {"dlrm_synthetic.json"}
    rc, out = _run(capsys, "run", "--chakra", str(et), "--topology", topo, "--format", "json")
    assert rc == 0, out.err
    row = json.loads(out.out)["rows"][0]
    assert row["mode"] == "chakra" and row["gpus"] == 4
    assert row["iteration_time_s"] == exported


def test_model_and_chakra_are_exclusive(tmp_path, capsys, root):
    topo = str(root / "topologies" / "h200_nvl8_ib_ndr.yaml")
    rc, out = _run(capsys, "run", "--model", str(root / "models" / "dlrm_synthetic.yaml"), "--chakra",
                   str(tmp_path), "--topology", topo)
    assert rc == 2 and "--chakra" in out.err
    rc, out = _run(capsys, "run", "--topology", topo)
    assert rc == 2 and "--model" in out.err


def test_a_single_rank_trace_says_its_collectives_move_nothing(tmp_path, capsys, root):
    # Chakra's generator records no rank count: a directory with one rank's file ran silently as a 1-GPU trace
    import shutil

    src = root / "tests" / "data" / "chakra" / "et_generator" / "ALL_REDUCE.0.et"
    shutil.copy(src, tmp_path / src.name)
    rc, out = _run(capsys, "run", "--chakra", str(tmp_path), "--topology",
                   str(root / "topologies" / "h200_nvl8_ib_ndr.yaml"))
    assert rc == 0 and "one rank's ET file" in out.err
    rc, out = _run(capsys, "run", "--chakra", str(root / "tests" / "data" / "chakra" / "et_generator" / "ALL_REDUCE"),
                   "--topology", str(root / "topologies" / "h200_nvl8_ib_ndr.yaml"))
    assert rc == 0 and "one rank's ET file" not in out.err

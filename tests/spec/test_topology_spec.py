import subprocess
import sys

import pytest
import yaml

from simfuse.errors import SpecError
from simfuse.spec import load_topology
from simfuse.units import parse_size_bytes


@pytest.mark.parametrize("name", ["h200_nvl8_ib_ndr.yaml", "h100_nvl8_ib_ndr.yaml"])
def test_shipped_topologies_load(root, name):
    t = load_topology(root / "topologies" / name)
    assert t.scale_up.gpus_per_node == 8
    assert t.scale_out.nic_bw_bytes_per_s == pytest.approx(50e9)
    assert t.scale_up.bw_bytes_per_s == pytest.approx(450e9)
    assert t.device.compute_units == 132


def test_h200_has_more_hbm_than_h100(root):
    h200 = load_topology(root / "topologies" / "h200_nvl8_ib_ndr.yaml")
    h100 = load_topology(root / "topologies" / "h100_nvl8_ib_ndr.yaml")
    assert h200.device.hbm_bw_bytes_per_s > h100.device.hbm_bw_bytes_per_s


@pytest.mark.parametrize("text,unit", [("64MiB", 64 * 2**20), ("1GB", 10**9), ("4096", 4096), ("2KiB", 2048),
                                       ("1.5KB", 1500), ("3G", 3 * 2**30), ("2TiB", 2 * 2**40),
                                       ("1PiB", 2**50), ("0.5PB", 5 * 10**14)])
def test_parse_size(text, unit):
    assert parse_size_bytes(text) == unit


@pytest.mark.parametrize("bad", ["-1MiB", "abc", "12XB", "", "2PiB"])
def test_parse_size_rejects(bad):
    with pytest.raises(SpecError):
        parse_size_bytes(bad)


def _mutate(root, tmp_path, fn):
    data = yaml.safe_load((root / "topologies" / "h200_nvl8_ib_ndr.yaml").read_text())
    fn(data)
    p = tmp_path / "topo.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


BAD_CASES = [
    ("missing field", lambda d: d["scale_up"].pop("bw_gbps"), "scale_up.bw_gbps"),
    ("negative bandwidth", lambda d: d["scale_out"].__setitem__("nic_bw_gbit", -400), "scale_out.nic_bw_gbit"),
    ("unknown fabric", lambda d: d["scale_out"].__setitem__("fabric", "torus3d"), "scale_out.fabric"),
    ("zero GPUs", lambda d: d["scale_up"].__setitem__("gpus_per_node", 0), "scale_up.gpus_per_node"),
    ("typo key", lambda d: d["device"].__setitem__("hbm_bw_gpbs", 1), "device.hbm_bw_gpbs"),
    ("string number", lambda d: d["device"].__setitem__("compute_units", "lots"), "device.compute_units"),
    ("unknown dtype", lambda d: d["device"]["peak_tflops"].__setitem__("fp7", 3), "device.peak_tflops.fp7"),
    ("full-node efficiency 0", lambda d: d["scale_out"].__setitem__("full_node_efficiency", 0),
     "scale_out.full_node_efficiency"),
    ("full-node efficiency above line rate", lambda d: d["scale_out"].__setitem__("full_node_efficiency", 1.2),
     "scale_out.full_node_efficiency"),
    ("full-node efficiency not a number", lambda d: d["scale_out"].__setitem__("full_node_efficiency", "high"),
     "scale_out.full_node_efficiency"),
    ("empty calibration path", lambda d: d.__setitem__("calibration", ""), "calibration"),
    ("negative min_ctas", lambda d: d["collectives"].__setitem__("min_ctas", -1), "collectives.min_ctas"),
    ("min_ctas above NCCL's 64 channels", lambda d: d["collectives"].__setitem__("min_ctas", 65),
     "collectives.min_ctas"),
    ("fractional min_ctas", lambda d: d["collectives"].__setitem__("min_ctas", 2.5), "collectives.min_ctas"),
    ("negative min_nchannels", lambda d: d["collectives"].__setitem__("min_nchannels", -4),
     "collectives.min_nchannels"),
    ("min_nchannels not a number", lambda d: d["collectives"].__setitem__("min_nchannels", "many"),
     "collectives.min_nchannels"),
]


@pytest.mark.parametrize("label,fn,field", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_topology_names_file_and_field(root, tmp_path, label, fn, field):
    p = _mutate(root, tmp_path, fn)
    with pytest.raises(SpecError) as exc:
        load_topology(p)
    assert exc.value.field == field
    assert str(p) in str(exc.value)


@pytest.mark.parametrize("content", ["name: [unclosed", "- just\n- a list\n", "", "\x00\x01binary"])
def test_not_yaml_or_not_mapping(tmp_path, content):
    p = tmp_path / "bad.yaml"
    p.write_text(content)
    with pytest.raises(SpecError) as exc:
        load_topology(p)
    assert str(p) in str(exc.value)


def test_cli_bad_topology_exit_2_no_traceback(root, tmp_path):
    p = _mutate(root, tmp_path, lambda d: d["scale_out"].__setitem__("nic_bw_gbit", -1))
    r = subprocess.run([sys.executable, "-m", "simfuse.cli", "collective", "--topology", str(p), "--op",
                        "all_reduce", "--size", "1MiB"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "scale_out.nic_bw_gbit" in r.stderr and str(p) in r.stderr


def test_cli_missing_file_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "simfuse.cli", "collective", "--topology",
                        str(tmp_path / "nope.yaml"), "--op", "all_reduce", "--size", "1MiB"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "nope.yaml" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("text,hint", [("5e-3", "write 0.005 or 5.0e-03"), ("1e6", "write 1000000 or 1.0e+06"),
                                       ("1.5e0", "write 1.5 or 1.5e+00")])
def test_exponent_notation_yaml_reads_as_text_says_how_to_write_it(root, tmp_path, text, hint):
    # PyYAML (YAML 1.1) reads 5e-3 unquoted as a string: the error said "expected a number, got '5e-3'"
    src = (root / "topologies" / "h200_nvl8_ib_ndr.yaml").read_text()
    p = tmp_path / "topo.yaml"
    p.write_text(src.replace("  put_post_us: 0.005", f"  put_post_us: {text}", 1))
    assert p.read_text() != src
    with pytest.raises(SpecError) as exc:
        load_topology(p)
    assert exc.value.field == "gpu_initiated.put_post_us" and hint in str(exc.value)
    assert yaml.safe_load(hint.split(" or ")[-1]) == pytest.approx(float(text))  # the suggestion reads as a number


def test_calibration_path_resolved_relative_to_file(root, tmp_path):
    p = _mutate(root, tmp_path, lambda d: d.__setitem__("calibration", "prof.yaml"))
    t = load_topology(p)
    assert t.calibration == str((tmp_path / "prof.yaml").resolve())


def test_with_overrides(h200):
    t = h200.with_overrides({"scale_out.nic_bw_bytes_per_s": 25e9})
    assert t.scale_out.nic_bw_bytes_per_s == 25e9
    with pytest.raises(SpecError):
        h200.with_overrides({"scale_out.nope": 1})


@pytest.mark.parametrize("key", ["strided_copy", "gemm_efficiency"])
def test_an_empty_optional_block_counts_as_absent(root, tmp_path, key):
    """``strided_copy:`` with nothing under it is the field left out (it was refused as an 'unknown field',
    which it is not); a misspelt one is still refused."""
    d = yaml.safe_load((root / "topologies" / "h100_nvl8_ib_ndr.yaml").read_text())
    d["device"][key] = None
    p = tmp_path / "t.yaml"
    p.write_text(yaml.safe_dump(d))
    assert getattr(load_topology(p).device, key) is None
    d["device"][key + "x"] = None
    p.write_text(yaml.safe_dump(d))
    with pytest.raises(SpecError, match=f"device.{key}x: unknown field"):
        load_topology(p)


def test_full_node_efficiency_is_optional_and_read_from_the_file(root, tmp_path, h200):
    assert h200.scale_out.full_node_efficiency is None  # files that do not name it: efficiency everywhere
    t = load_topology(_mutate(root, tmp_path, lambda d: d["scale_out"].__setitem__("full_node_efficiency", 0.85)))
    assert t.scale_out.full_node_efficiency == 0.85 and t.scale_out.efficiency == h200.scale_out.efficiency

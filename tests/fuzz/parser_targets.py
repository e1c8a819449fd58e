"""Every input parser, each with a valid sample, for the property tests (run inside a limited child process).

``mutations(sample, rng)`` gives the inputs each parser must survive: random bytes, truncations of the valid
sample at random points, random byte flips in it, and a gzip of a truncation.  ``check(name, n, seed, tmp)``
runs ``n`` of them through parser ``name`` and returns the failures: any exception that is not a
:class:`~simfuse.errors.SimfuseError` (which the CLI turns into exit 2).
"""

from __future__ import annotations

import functools
import gzip
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
TOPO = ROOT / "topologies" / "h200_nvl8_ib_ndr.yaml"
MODEL = ROOT / "models" / "dlrm_synthetic.yaml"
DATA = ROOT / "tests" / "data"


def _plan_csv() -> bytes:
    return ("table,sharding,ranks\n" + "".join(f"t{t},table_wise,{t}\n" for t in range(8))).encode()


def _torchrec_text() -> bytes:
    head = "module: ebc\n\n param | sharding type | compute kernel | ranks\n----- | ----- | ----- | -----\n"
    rows = "".join(f"t{t} | table_wise | fused | [{t}]\n" for t in range(8))
    shard_head = "\n param | shard offsets | shard sizes | placement\n----- | ----- | ----- | -----\n"
    shards = "".join(f"t{t} | [0, 0] | [1000000, 64] | rank:{t}/cuda:{t}\n" for t in range(8))
    return (head + rows + shard_head + shards).encode()


def _torchrec_json() -> bytes:
    return json.dumps({"ebc": {f"t{t}": {"sharding_type": "table_wise", "ranks": [t], "shards": [
        {"offsets": [0, 0], "sizes": [1000000, 64], "rank": t}]} for t in range(8)}}).encode()


def _torchrec_repr() -> bytes:
    parts = [f"'t{t}': ParameterSharding(sharding_type='table_wise', compute_kernel='fused', ranks=[{t}], "
             f"sharding_spec=EnumerableShardingSpec(shards=[ShardMetadata(shard_offsets=[0, 0], "
             f"shard_sizes=[1000000, 64], placement=rank:{t}/cuda:{t})]))" for t in range(8)]
    return ("{'ebc': {" + ", ".join(parts) + "}}\n").encode()


def _kernel_trace() -> bytes:
    head = ("run_id,kernel,variant,backend,world_size,rank,dtype,shape,grid,num_warps,launch_ns,kernel_end_ns,"
            "program_id,start_ns,end_ns,smid,flops_per_program,bytes_per_program\n")
    rows = []
    for p in range(6):
        start = 1_700_000_000_000_005_000 + (p // 3) * 1000
        rows.append(f"r0,embedding_all_to_all,fused,emulated,4,0,fp32,bags=24;dim=128;mode=sum;pooling=32;rows=1000;"
                    f"tables=1,6,4,1700000000000000000,{start + 3000},{p},{start},{start + 1000},{p % 3},0.0,65536.0\n")
    return (head + "".join(rows)).encode()


@functools.lru_cache(maxsize=1)
def _model_and_system():
    from simfuse.spec import load_workload
    from simfuse.system import System

    return load_workload(MODEL), System.load(TOPO)


def _plan_loader(path):
    from simfuse.workloads.plan_file import load_plan

    spec, system = _model_and_system()
    return load_plan(path, spec, system, 1, 8, "baseline")


def _chakra(path):
    from simfuse.graph.chakra import import_et

    return import_et([path])


def _comm_groups(path):
    from simfuse.graph.chakra.convert import _load_comm_groups_json

    return _load_comm_groups_json(Path(path))


def _targets():
    from simfuse.calibrate.campaign import read_campaign
    from simfuse.calibrate.detect import detect_format
    from simfuse.calibrate.kernel_trace import read_kernel_runs
    from simfuse.calibrate.kineto_nccl import kineto_nccl_samples
    from simfuse.calibrate.nccl_tests import read_nccl_tests
    from simfuse.calibrate.torch_trace import read_torch_trace
    from simfuse.calibrate.validate import read_measurements
    from simfuse.profile.load import load_profile
    from simfuse.spec import load_topology, load_workload

    held = (ROOT / "experiments" / "results" / "h200_kernel_heldout.csv").read_bytes()
    campaign = gzip.decompress((ROOT / "experiments" / "results" / "h200_campaign" / "heldout5" /
                                "campaign.csv.gz").read_bytes())
    return {
        "topology-yaml": (load_topology, TOPO.read_bytes(), ".yaml"),
        "model-yaml": (load_workload, MODEL.read_bytes(), ".yaml"),
        "profile-yaml": (load_profile, (ROOT / "profiles" / "h200_calibration.yaml").read_bytes()[:20000], ".yaml"),
        "plan-csv": (_plan_loader, _plan_csv(), ".csv"),
        "torchrec-text": (_plan_loader, _torchrec_text(), ".txt"),
        "torchrec-json": (_plan_loader, _torchrec_json(), ".json"),
        "torchrec-repr": (_plan_loader, _torchrec_repr(), ".txt"),
        "chakra-et": (_chakra, (DATA / "chakra" / "et_generator" / "one_metadata_node_all_types.0.et").read_bytes(),
                      ".0.et"),
        "comm-group-json": (_comm_groups, b'{"1": [0, 1], "2": {"ranks": [2, 3]}}', ".json"),
        "nccl-tests-log": (read_nccl_tests, (DATA / "nccl_tests" / "h100_2x8_all_reduce_soperator.log").read_bytes(),
                           ".log"),
        "kineto-trace": (read_torch_trace, (DATA / "calibrate" / "torch_nccl_kineto.json").read_bytes(), ".json"),
        "kineto-nccl": (kineto_nccl_samples, (DATA / "calibrate" / "torch_nccl_kineto.json").read_bytes(), ".json"),
        "kernel-trace": (read_kernel_runs, _kernel_trace(), ".csv"),
        "campaign-csv": (read_campaign, campaign[:30000], ".csv"),
        "measurements-csv": (read_measurements, held, ".csv"),
        "detect-format": (detect_format, held, ".csv"),
    }


TARGETS = ("topology-yaml", "model-yaml", "profile-yaml", "plan-csv", "torchrec-text", "torchrec-json",
           "torchrec-repr", "chakra-et", "comm-group-json", "nccl-tests-log", "kineto-trace", "kineto-nccl",
           "kernel-trace", "campaign-csv", "measurements-csv", "detect-format")


def mutations(sample: bytes, rng: np.random.Generator, n: int):
    """``n`` hostile variants of ``sample`` (see the module doc), deterministic for a given ``rng``."""
    for i in range(n):
        kind = i % 4
        if kind == 0:
            yield "random", rng.integers(0, 256, int(rng.integers(0, 4096)), dtype=np.uint8).tobytes()
        elif kind == 1:
            yield "truncated", sample[: int(rng.integers(0, len(sample) + 1))]
        elif kind == 2:
            b = bytearray(sample)
            for _ in range(int(rng.integers(1, 16))):
                if b:
                    b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
            yield "flipped", bytes(b)
        else:
            yield "gzip-truncated", gzip.compress(sample, mtime=0)[: int(rng.integers(0, len(sample) + 20))]


def check(name: str, n: int, seed: int, tmp: Path) -> list[str]:
    from simfuse.errors import SimfuseError

    fn, sample, suffix = _targets()[name]
    rng = np.random.default_rng(seed)
    failures = []
    for i, (kind, data) in enumerate(mutations(sample, rng, n)):
        path = tmp / f"case{i}{suffix}"
        path.write_bytes(data)
        try:
            fn(path)
        except SimfuseError:
            pass
        except Exception as exc:  # noqa: BLE001 - what the property test is looking for
            failures.append(f"{name} #{i} ({kind}): {type(exc).__name__}: {str(exc)[:200]}")
        finally:
            path.unlink()
    # the valid sample itself parses (the mutations start from something real)
    path = tmp / f"valid{suffix}"
    path.write_bytes(sample)
    try:
        fn(path)
    except Exception as exc:  # noqa: BLE001
        if name not in ("campaign-csv", "profile-yaml"):  # cut to a prefix to keep the run short: may not parse
            failures.append(f"{name} valid sample: {type(exc).__name__}: {str(exc)[:200]}")
    return failures


if __name__ == "__main__":  # python -m tests.fuzz.parser_targets NAME[,NAME...] N SEED TMP
    print(json.dumps([f for name in sys.argv[1].split(",") for f in
                      check(name, int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))]))

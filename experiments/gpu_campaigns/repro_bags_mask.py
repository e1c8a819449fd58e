"""Reproduce the Triton 3.6 index-load mask defect on the kernels of another checkout (``--root``): embedding with
bags_per_program 16/32/64 and 1-16 warps.  Prints one line per case."""

import argparse
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--root", required=True)
a = ap.parse_args()
sys.path.insert(0, a.root)
import torch  # noqa: E402

import simfuse.kernels as sk  # noqa: E402

print("simfuse from", sk.__file__)
dev = torch.device("cuda")
g = torch.Generator(device=dev).manual_seed(0)
grp = sk.EmulatedGroup(2, dev)
w = [torch.randn(500, 128, device=dev, generator=g) for _ in range(2)]
of = [torch.arange(129, device=dev) * 4 for _ in range(2)]
ix = [torch.randint(0, 500, (512,), device=dev, generator=g) for _ in range(2)]
ref = sk.embedding_reference(w, ix, of)
for bags in (16, 32, 64):
    for nw in (1, 2, 4, 8, 16):
        try:
            out = sk.embedding_all_to_all(grp, w, ix, of, config=sk.EmbeddingConfig(bags_per_program=bags, num_warps=nw))
            err = max(float((o.cpu().double() - r).norm() / r.norm()) for o, r in zip(out, ref, strict=False))
            print(f"bags={bags} warps={nw}: ok rel_err={err:.2e}")
        except Exception as e:  # noqa: BLE001
            print(f"bags={bags} warps={nw}: {type(e).__name__}: {str(e).splitlines()[-1][:200] if str(e) else ''}")

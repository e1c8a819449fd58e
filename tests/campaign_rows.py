"""Synthetic campaign rows (the columns of experiments/gpu_campaigns/trace_campaign.py) for the calibration tests."""


def embedding_row(dim: int, pooling: int, bags: int, grid: int, flops_per_wg: float, bytes_per_wg: float,
                  time_s: float) -> dict:
    """One fp32 embedding compute launch at the campaign's default configuration (8 bags, 8 warps)."""
    return dict(kernel="embedding_all_to_all", variant="compute", dtype="fp32", world=1, dim=dim,
                pooling=pooling, bags=bags, m=0, n=0, k=0, tokens=0, grid=grid, bags_per_wg=8,
                block_m=0, block_n=0, block_k=0, split_k=0, num_warps=8, num_stages=0,
                flops_per_wg=flops_per_wg, bytes_per_wg=bytes_per_wg, median_s=time_s, p10_s=time_s,
                p90_s=time_s, n_regs=32, n_spills=0, shared_bytes=0, device="synthetic", date="2026-12-03")

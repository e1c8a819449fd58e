"""Workload builders (DLRM, LLM, decode, MoE), the sharding planner and the run pipeline of ``simfuse run``."""

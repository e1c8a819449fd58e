"""simfuse: simulate (and run) fused computation-collective operators.

Layers (data flows one way): ``spec`` (validated YAML) -> ``network``/``engine`` (simpy) -> ``results``
(DataFrames, plots, Perfetto traces).  ``simfuse.kernels`` (Triton) is an optional extra imported lazily.
"""

__version__ = "0.1.0"

"""Kept until the callers take :func:`benchmarks.harness.profiling.profile_stage` (issue 17)."""

from benchmarks.harness.profiling import STAGE_LAYERS as LAYERS, profile_stage, stage_layer as layer

__all__ = ["LAYERS", "layer", "profile_stage"]

"""Where and how a job runs its models, declared once for every job's config: `Placement` (device, dtype: what a
training job needs) and `RuntimeOptions` (with the inference engine: the fill engine's, the build's and an update's
configs). Each job's flags and environment variables derive from its config (common.cli), so these are spelled and
described the same way everywhere."""

from __future__ import annotations

from pydantic import BaseModel, Field

from encoder.onnx_engine import ENGINE_HELP


class Placement(BaseModel):
    """The device and the precision the models run at."""

    device: str = Field("auto", description="auto, cpu, cuda or cuda:N")
    dtype: str = Field("auto", description="auto, fp32, bf16 or fp16")


class RuntimeOptions(Placement):
    """`Placement`, and the engine that runs the encoder's and the reader's inference passes."""

    engine: str = Field("auto", description=ENGINE_HELP)

"""What-if: predict each DDP variant's step time from one rank's trace.

``extract`` reads gradient-ready times, gradient sizes and the compute timeline from a trace;
``costmodel`` fits latency + bytes / bandwidth per collective type; ``schedule`` replays a
step under each variant's communication schedule; ``predict`` is the facade the CLI and the
report call. Everything here is pure over the extracted data; nothing imports torch.
"""

from tracekit.whatif.predict import WhatIf, predict_path

__all__ = ["WhatIf", "predict_path"]

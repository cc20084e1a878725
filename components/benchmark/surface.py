"""The benchmark step's surface (components/surface.py): ``benchmark_inference`` against ``BenchmarkConfig``."""

from components.benchmark.component import benchmark_inference, join_benchmarks
from components.benchmark.config import BenchmarkConfig
from components.surface import StepOutputs, Surface


def headline(out: StepOutputs) -> str:
    """Images per second in process, and over REST where it was timed."""
    m = out.metadata("metrics")
    rest = f", {m['http_images_per_sec']:,.0f} over REST (local Python server)" if "http_images_per_sec" in m else ""
    return f"{m.get('images_per_sec', 0):,.0f} images/s in process{rest}"


SURFACES = (
    Surface(
        benchmark_inference, BenchmarkConfig, step_only=frozenset({"split"}), headline=headline, record="benchmark"
    ),
    Surface(join_benchmarks),
)

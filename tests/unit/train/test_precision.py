"""The precision chosen per device (``precision: auto``), from recorded ``/proc/cpuinfo`` texts."""

from pathlib import Path

import pytest

from trainer import distribute
from trainer.config import ConfigError, TrainConfig
from trainer.distribute import choose_precision, cpu_bf16_units, gpu_precision

CPUINFO = Path(__file__).parents[1] / "cpuinfo"  # tests/unit/cpuinfo
AVX2 = (CPUINFO / "amd-epyc-avx2.txt").read_text()
BF16 = (CPUINFO / "amd-epyc-avx512-bf16.txt").read_text()
AMX = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"


def test_the_recorded_texts_are_of_both_kinds():
    assert "avx2" in distribute.cpu_flags(AVX2) and not distribute.CPU_BF16_FLAGS & distribute.cpu_flags(AVX2)
    assert "avx512_bf16" in distribute.cpu_flags(BF16)


def test_cpu_without_bf16_units_trains_in_float32():
    choice = choose_precision("auto", "cpu", cpuinfo=AVX2, environ={})
    assert choice.policy == "float32" and "emulated" in choice.reason


@pytest.mark.parametrize("text", [BF16, AMX])
def test_cpu_with_bf16_units_trains_in_bfloat16(text):
    choice = choose_precision("auto", "cpu", cpuinfo=text, environ={})
    assert choice.policy == "mixed_bfloat16" and "bf16" in choice.reason


def test_only_a_cpu_with_avx512_bf16_alone_times_both_policies():
    # avx512_bf16 alone is a real choice (0.89x to 1.18x): timed; AMX tiles are not: bf16 without timing.
    bf16, amx = (choose_precision("auto", "cpu", cpuinfo=t, environ={}) for t in (BF16, AMX))
    assert distribute.precision_candidates("auto", bf16, "cpu", cpuinfo=BF16) == ("mixed_bfloat16", "float32")
    assert distribute.precision_candidates("auto", amx, "cpu", cpuinfo=AMX) == ("mixed_bfloat16",)
    plain = choose_precision("auto", "cpu", cpuinfo=AVX2, environ={})
    assert distribute.precision_candidates("auto", plain, "cpu", cpuinfo=AVX2) == ("float32",)
    assert distribute.precision_candidates("auto", bf16, "cpu", workers=2, cpuinfo=BF16) == ("mixed_bfloat16",)


@pytest.mark.parametrize(
    ("environ", "native"),
    [
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, False),  # the units hidden from oneDNN: emulated
        ({"ONEDNN_MAX_CPU_ISA": "avx2"}, False),
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, True),
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, True),
        ({"ONEDNN_MAX_CPU_ISA": "ALL"}, True),
        ({"TF_ENABLE_ONEDNN_OPTS": "0"}, False),  # TensorFlow's own kernels emulate bf16
        ({"TF_ENABLE_ONEDNN_OPTS": "1"}, True),
    ],
)
def test_onednn_settings_that_hide_the_units_are_respected(environ, native):
    assert (cpu_bf16_units(BF16, environ) is not None) is native
    assert choose_precision("auto", "cpu", cpuinfo=BF16, environ=environ).policy == (
        "mixed_bfloat16" if native else "float32"
    )


def test_accelerators_and_explicit_values():
    assert choose_precision("auto", "tpu").policy == "mixed_bfloat16"
    assert gpu_precision((9, 0)).policy == "mixed_bfloat16"  # H100/H200
    assert gpu_precision((7, 0)).policy == "mixed_float16"  # V100
    assert gpu_precision((6, 0)).policy == "float32"  # P100: no tensor cores
    assert gpu_precision(None).policy == "mixed_float16"
    assert choose_precision("auto", "gpu", gpu_capability=(8, 0)).policy == "mixed_bfloat16"
    # A value the user sets always wins, whatever the device.
    assert choose_precision("float32", "tpu").policy == "float32"
    assert choose_precision("mixed_bfloat16", "cpu", cpuinfo=AVX2, environ={}).policy == "mixed_bfloat16"


def test_bad_values_name_the_valid_ones():
    with pytest.raises(ValueError, match="expected one of auto, mixed_bfloat16"):
        choose_precision("bf16", "cpu", cpuinfo=AVX2, environ={})
    with pytest.raises(ConfigError, match="precision"):
        TrainConfig.from_dict({"precision": "half"})
    assert TrainConfig().precision == "auto"

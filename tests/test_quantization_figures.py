"""Section 5's figures and controls (helpers.s05_figures): the schemes the controls name, and figures that show
what was computed (counts that add up, one trace per kind, the levels where they belong)."""
from __future__ import annotations

import pytest
import torch

from helpers import s05_figures as F
from helpers import s05_quantization as Q


def _weights(seed=0, rows=64, cols=128):
    w = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed))
    w[3, 5] = 40.0                                            # one outlier sets a per-tensor scale
    return w


def test_scheme_for_names_the_granularity_the_way_the_quantizer_applies_it():
    w = _weights()
    cases = {("uniform", 4, "tensor"): Q.Scheme("", "absmax", 4),
             ("uniform", 3, "row"): Q.Scheme("", "absmax", 3, axis=-1),
             ("uniform", 8, "64"): Q.Scheme("", "absmax", 8, group_size=64),
             ("NF4", 4, "128"): Q.Scheme("", "nf4", 4, group_size=128)}
    for args, expected in cases.items():
        assert torch.equal(F.scheme_for(*args).fake_quantize(w), expected.fake_quantize(w)), args
    assert F.scheme_for("uniform", 4, "row").name == "uniform 4-bit, one scale per row"
    assert F.scheme_for("NF4", 4, "64").name == "NF4, blocks of 64"


def test_scheme_for_refuses_what_the_controls_do_not_offer_with_one_sentence():
    for args, match in [(("linear", 4, "tensor"), "levels must be"), (("uniform", 4, "100"), "weights per scale"),
                        (("NF4", 3, "64"), "4-bit format")]:
        with pytest.raises(ValueError, match=match):
            F.scheme_for(*args)


def test_granularity_errors_follow_the_blocks_from_the_smallest_and_grow_with_them_here():
    w = _weights()
    errs = F.granularity_errors(w, 4)
    assert F.BY_BLOCK[0] == "32" and F.BY_BLOCK[-1] == "tensor" and len(errs) == len(F.BY_BLOCK)
    assert errs[-1] == Q.relative_error(w, Q.Scheme("", "absmax", 4).fake_quantize(w))
    assert errs[0] < errs[-1] / 3                    # the outlier's block only, against the whole matrix


def test_histograms_count_every_weight_and_draw_levels_only_for_one_scale_per_tensor():
    w = _weights()
    traces = list(F.histogram_traces(w, F.scheme_for("uniform", 3)))
    assert [t.name for t in traces] == ["weights", "after quantization", "levels"]
    assert sum(traces[0].y) == w.numel() == sum(traces[1].y)
    assert len([x for x in traces[2].x if x is not None]) == 2 * 7          # 7 levels at 3 bits, two ends each
    assert len(list(F.histogram_traces(w, F.scheme_for("uniform", 3, "row")))) == 2


def test_the_figures_build_one_step_per_value_and_the_live_ones_refuse_bad_blocks():
    w = {f"model.layers.{i}.{p}.weight": _weights(i) for i in range(2) for p in Q.PROJECTIONS}
    errors = {"a": torch.rand(len(w)), "b": torch.rand(len(w))}
    fig = F.per_matrix_figure(errors, list(w), active=1)
    assert len(fig.layout.sliders[0].steps) == 2 and len(fig.data) == 2 * len(Q.PROJECTIONS)
    assert len(F.histogram_slider("model.layers.0.mlp.up_proj.weight", _weights(), by="block").data) >= 14
    with pytest.raises(ValueError, match="by must be"):
        F.histogram_slider("m", _weights(), by="size")
    with pytest.raises(ValueError, match="does not divide"):
        F.normalized_one(w, "model.layers.0.mlp.up_proj.weight", 100)
    assert "NF4 error" in F.normalized_one(w, "model.layers.0.mlp.up_proj.weight", 64).layout.title.text


def test_the_kernel_figure_draws_the_quoted_line_only_when_given():
    ms, mb = {"fp32": 100.0, "int8": 60.0}, {"fp32": 500.0, "int8": 200.0}
    assert len(F.kernel_figure(mb, ms).layout.shapes) == 0
    assert len(F.kernel_figure(mb, ms, 9.1).layout.shapes) == 1


def test_names_and_numbers_as_the_tables_print_them():
    assert F.short("model.layers.27.mlp.gate_proj.weight") == "layers.27.mlp.gate_proj"
    assert [F.readable(v) for v in (884736, 53845.3, 0.0017457, 51.311)] == ["884,736", "53,845", "0.001746", "51.31"]

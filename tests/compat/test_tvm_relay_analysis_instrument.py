"""relay.analysis feature detection / fused-function extraction and tvm.ir.instrument, in TVM's
idiom; expected answers follow from each program's construction."""

import numpy as np
import pytest
import tvm
from tvm import relay
from tvm.relay.analysis import Feature, detect_feature


def test_feature_numbering_is_tvms():
    assert [f.value for f in (Feature.fVar, Feature.fMatch, Feature.fGraph, Feature.fLetRec)] \
        == [0, 14, 15, 16]


def test_detect_feature_of_a_tree_program():
    x = relay.var("x", shape=(2,))
    r = relay.var("r")
    body = relay.Let(r, relay.RefCreate(x),
                     relay.If(relay.const(True),
                              relay.TupleGetItem(relay.Tuple([relay.RefRead(r)]), 0),
                              relay.RefWrite(r, x)))
    found = detect_feature(relay.Function([x], body))
    assert found == {Feature.fVar, Feature.fConstant, Feature.fTuple, Feature.fTupleGetItem,
                     Feature.fFunction, Feature.fLet, Feature.fIf, Feature.fRefCreate,
                     Feature.fRefRead, Feature.fRefWrite}


def test_shared_call_is_a_graph_shared_var_is_not():
    x = relay.var("x", shape=(2,))
    tree = relay.Function([x], relay.add(x, x))
    assert Feature.fGraph not in detect_feature(tree)
    shared = relay.add(x, x)
    graph = relay.Function([x], relay.multiply(shared, shared))
    assert detect_feature(graph) == {Feature.fVar, Feature.fOp, Feature.fCall, Feature.fFunction,
                                     Feature.fGraph}


def test_recursive_let_is_letrec_and_module_form_reads_every_function():
    f = relay.var("f")
    n = relay.var("n", shape=(), dtype="int32")
    loop = relay.Function([n], relay.Call(f, [n]))
    expr = relay.Let(f, loop, f)
    assert Feature.fLetRec in detect_feature(expr)
    mod = tvm.IRModule()
    gv = relay.GlobalVar("g")
    mod[gv] = relay.Function([n], n)
    main = relay.Function([n], relay.Call(gv, [n]))
    assert Feature.fGlobalVar in detect_feature(main, mod)
    assert detect_feature(mod) == {Feature.fVar, Feature.fFunction}
    with pytest.raises(tvm.TVMError, match="one expression and/or one IRModule"):
        detect_feature(main, main)


def test_check_constant():
    assert relay.analysis.check_constant(relay.Tuple([relay.const(1), relay.const(2.0)]))
    assert not relay.analysis.check_constant(relay.Tuple([relay.const(1), relay.var("v")]))


def test_extract_fused_functions_keeps_every_operator_once():
    x = relay.var("x", shape=(1, 4), dtype="float32")
    w = relay.var("w", shape=(3, 4), dtype="float32")
    dense = relay.nn.dense(x, w)
    out = relay.nn.softmax(relay.nn.relu(relay.add(dense, relay.const(1.0))))
    mod = tvm.IRModule.from_expr(relay.Function([x, w], out))
    fused = relay.analysis.extract_fused_functions(mod)
    assert fused and all(int(f.attrs["Primitive"]) == 1 for f in fused.values())
    assert len(set(fused)) == len(fused)
    total = {}
    for func in fused.values():
        for name, count in relay.analysis.list_op_freqs(tvm.IRModule.from_expr(func)).items():
            total[name] = total.get(name, 0) + count
    assert total == relay.analysis.list_op_freqs(mod) == {
        "nn.dense": 1, "add": 1, "nn.relu": 1, "nn.softmax": 1}


def test_pass_instrument_can_skip_a_pass():
    @tvm.instrument.pass_instrument()
    class SkipFold:
        def __init__(self):
            self.skipped = []

        def should_run(self, mod, info):
            if info.name == "FoldConstant":
                self.skipped.append(info.name)
                return False
            return True

    expr = relay.add(relay.const(np.ones(2, "float32")), relay.const(np.ones(2, "float32")))
    mod = tvm.IRModule.from_expr(relay.Function([], expr))
    skip = SkipFold()
    with tvm.transform.PassContext(instruments=[skip]):
        kept = relay.transform.FoldConstant()(mod)
    assert skip.skipped == ["FoldConstant"]
    assert isinstance(kept["main"].body, relay.Call)
    folded = relay.transform.FoldConstant()(mod)
    assert isinstance(folded["main"].body, relay.Constant)


def test_printing_and_timing_instruments(capsys):
    x = relay.var("x", shape=(2,))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.add(x, x)))
    timing = tvm.ir.instrument.PassTimingInstrument()
    printer = tvm.ir.instrument.PassPrintingInstrument([], ["InferType"])
    with tvm.transform.PassContext(instruments=[timing, printer,
                                                tvm.ir.instrument.PrintBeforeAll()]):
        relay.transform.InferType()(mod)
        report = timing.render()
    out = capsys.readouterr().out
    assert "Before Running Pass:" in out and "Print IR after: InferType" in out
    assert "add(" in out
    assert report.startswith("InferType:")


def test_relay_parse_expr_reads_the_text_format():
    expr = relay.parse_expr("free_var %x: Tensor[(2), float32]; add(%x, %x)")
    x = relay.analysis.free_vars(expr)[0]
    assert tvm.ir.structural_equal(expr, relay.add(x, x), map_free_vars=True)

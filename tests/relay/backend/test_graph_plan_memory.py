"""Static memory planning (TVM's token algorithm) against a liveness oracle."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.relay.backend.graph_plan_memory import PlanNode, plan_memory


def _chain_seed():
    # out1 = a + b; out2 = out1 + a; out = out2 + b  (the seed document's example)
    return [PlanNode("input", [40], []), PlanNode("input", [40], []),
            PlanNode("op", [40], [(0, 0), (1, 0)]), PlanNode("op", [40], [(2, 0), (0, 0)]),
            PlanNode("op", [40], [(3, 0), (1, 0)])]


def test_seed_chain_storage_ids():
    plan = plan_memory(_chain_seed(), [(4, 0)])
    assert plan.storage_ids == [0, 1, 2, 3, 2]
    assert plan.planned_bytes == 160 and plan.peak_live_bytes == 160


def test_size_match_range_reuses_within_16x_only():
    nodes = [PlanNode("input", [64], []), PlanNode("op", [64], [(0, 0)]),
             PlanNode("op", [4096], [(1, 0)]),   # frees node 1's 64 bytes
             PlanNode("op", [32], [(2, 0)]),     # 64 is within [32, 512]: reuse
             PlanNode("op", [1 << 20], [(3, 0)])]  # 4096 < 2^20/16: no reuse
    plan = plan_memory(nodes, [(4, 0)])
    ids = plan.storage_ids
    assert ids[3] == ids[1] and ids[4] not in ids[:4]


def test_reshape_alias_shares_its_input_storage():
    nodes = [PlanNode("input", [16], []), PlanNode("op", [16], [(0, 0)]),
             PlanNode("alias", [16], [(1, 0)]), PlanNode("op", [16], [(2, 0)])]
    ids = plan_memory(nodes, [(3, 0)]).storage_ids
    assert ids[2] == ids[1] and ids[3] != ids[1]


def test_inputs_are_never_reused():
    nodes = [PlanNode("input", [16], []), PlanNode("op", [16], [(0, 0)]),
             PlanNode("op", [16], [(1, 0)])]
    ids = plan_memory(nodes, [(2, 0)]).storage_ids
    assert ids[0] not in ids[1:]


def test_multi_output_node_and_unused_output_is_released():
    nodes = [PlanNode("input", [8], []), PlanNode("op", [8, 8], [(0, 0)]),
             PlanNode("op", [8], [(1, 0)])]  # output (1, 1) is never used
    ids = plan_memory(nodes, [(2, 0)]).storage_ids  # entries: x, out0, out1, y
    assert len(ids) == 4 and ids[1] != ids[2]
    assert ids[3] == ids[2]  # the unused output's storage was freed right after its node


@st.composite
def _graphs(draw):
    n_inputs = draw(st.integers(1, 3))
    nodes = [PlanNode("input", [draw(st.sampled_from([4, 16, 64]))], []) for _ in range(n_inputs)]
    for _ in range(draw(st.integers(1, 12))):
        k = len(nodes)
        args = draw(st.lists(st.integers(0, k - 1), min_size=1, max_size=3))
        kind = draw(st.sampled_from(["op", "op", "op", "alias"]))
        if kind == "alias":
            args = args[:1]
        size = nodes[args[0]].output_bytes[0] if kind == "alias" else draw(
            st.sampled_from([4, 16, 64, 256, 4096]))
        nodes.append(PlanNode(kind, [size], [(a, 0) for a in args]))
    outputs = [(len(nodes) - 1, 0)]
    return nodes, outputs


@settings(max_examples=200, deadline=None)
@given(_graphs())
def test_no_two_live_entries_share_storage(graph):
    nodes, outputs = graph
    plan = plan_memory(nodes, outputs)
    ids = plan.storage_ids
    # independent liveness: entry i lives from its node to its last reader (outputs: to end)
    end = len(nodes)
    last = {i: i for i in range(end)}
    for nid, node in enumerate(nodes):
        for src, _ in node.inputs:
            last[src] = max(last[src], nid)
    for src, _ in outputs:
        last[src] = end
    alias_of = {}
    for nid in range(end):
        root = nid
        while nodes[root].kind == "alias":
            root = nodes[root].inputs[0][0]
        alias_of[nid] = root
    for i in range(end):
        for j in range(i + 1, end):
            if alias_of[i] == alias_of[j]:
                assert ids[i] == ids[j]
                continue
            start_i = 0 if nodes[i].kind == "input" else i
            start_j = 0 if nodes[j].kind == "input" else j
            stop_i = max(last[k] for k in range(end) if alias_of[k] == alias_of[i])
            stop_i = end if nodes[alias_of[i]].kind == "input" else stop_i
            stop_j = max(last[k] for k in range(end) if alias_of[k] == alias_of[j])
            stop_j = end if nodes[alias_of[j]].kind == "input" else stop_j
            overlap = start_i <= stop_j and start_j <= stop_i
            if overlap:
                assert ids[i] != ids[j], (i, j, ids)
    for sid, size in enumerate(plan.storage_bytes):
        assert all(nodes[n].output_bytes[0] <= size for n in range(end) if ids[n] == sid)
    assert plan.planned_bytes >= plan.peak_live_bytes or any(n.kind == "alias" for n in nodes)

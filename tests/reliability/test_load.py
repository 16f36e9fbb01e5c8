"""One node server process under 32 concurrent clients: every operation succeeds, and afterwards nothing
is lost, nothing duplicated, and every element holds each producer's tuples in the order it moved them.

The workload is benchmarks/load_bench.py's (threads, each with its own pastset.connect client: see
why there); this is its bounded run, 32 x 300 operations instead of 32 x 5 000.
"""

from runs import benchmark

CLIENTS, OPS = 32, 300


def test_32_concurrent_clients_lose_nothing_duplicate_nothing_and_keep_order(spawn_server):
    bench = benchmark("load_bench")
    server = spawn_server()
    result = bench.run_load(server.endpoint, CLIENTS, OPS, "threads")
    print(f"{result.clients} clients x {result.ops_per_client} ops: {result.ops_per_s:,.0f} ops/s, "
          f"p50 {result.p50_us:,.0f} µs, p99 {result.p99_us:,.0f} µs, max {result.max_us / 1000:,.1f} ms")
    assert result.problems == []
    assert result.ops == CLIENTS * OPS
    assert result.tuples == CLIENTS * OPS // 2           # half the operations are moves
    assert result.ops_per_s > 0 and result.p99_us >= result.p50_us > 0
    assert server.proc.poll() is None


def test_the_count_check_catches_a_lost_a_duplicated_and_a_reordered_tuple(spawn_server):
    """The check itself: tamper with what the clients say they moved, and it must notice."""
    bench = benchmark("load_bench")
    server = spawn_server()
    stem = "tamper"
    results = [bench.client_run(server.endpoint, stem, i, 40) for i in range(2)]
    assert bench.check(server.endpoint, stem, results) == (40, [])
    lost = [bench.ClientResult(r.client, {k: list(v) for k, v in r.moved.items()}) for r in results]
    k = next(k for k, moves in lost[0].moved.items() if moves)
    seq, index = lost[0].moved[k][-1]
    lost[0].moved[k].append((seq + 1, index + 100))        # a move the element does not hold
    assert bench.check(server.endpoint, stem, lost)[1]
    import pastset
    with pastset.connect(server.endpoint) as c:
        c.element(f"{stem}/shared{k}").move((0, 0, bench.PAYLOAD))   # a duplicate, out of order
    assert any("comes after" in p or "tuples from index" in p for p in bench.check(server.endpoint, stem, results)[1])

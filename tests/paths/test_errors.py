"""PATHS's errors are EventSpace errors, not tuple-space ones, and reach a remote caller as themselves."""

import pytest

import pastset
from paths import PathsError


def broken_tree():
    raise PathsError("stage t/0: the tree is broken (a child left)")


@pytest.fixture(params=["local", "tcp"])
def node(request):
    """A node server in this process hosting a PATHS service that fails, served under the backend's
    scheme; (its endpoint, its name)."""
    server = pastset.TupleServer(f"errors-{request.param}")
    server.host("paths.blocking", broken_tree)
    server.host("paths.inline", broken_tree, inline=True)
    endpoint = server.serve("local://" if request.param == "local" else "tcp://127.0.0.1:0")
    yield endpoint, server.name
    server.close()


@pytest.mark.parametrize("name", ["paths.blocking", "paths.inline"])
def test_a_hosted_paths_error_reaches_the_caller_as_itself_and_not_as_a_tuple_space_error(node, name):
    endpoint, _ = node
    with pastset.connect(endpoint) as client:
        with pytest.raises(pastset.EventSpaceError) as raised:
            try:
                client.call(name)
            except pastset.PastSetError as exc:   # what an application's error must not be taken for
                pytest.fail(f"a PathsError was caught as a tuple-space error: {exc!r}")
    assert type(raised.value) is PathsError and "the tree is broken" in str(raised.value)


def test_a_paths_error_in_a_round_of_requests_is_that_reply_s_error(node):
    endpoint, server = node
    fanout = pastset.Fanout({server: endpoint})
    try:
        pulls = fanout.round(5)
        reply = pulls.call(server, "paths.blocking")
        assert pulls.wait() == set()
        assert type(reply.error) is PathsError and "the tree is broken" in str(reply.error)
    finally:
        fanout.close()

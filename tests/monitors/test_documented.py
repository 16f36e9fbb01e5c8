"""The README explains what the monitors report: every heartbeat status, and what the dashboard does
with the steps a program reports."""

import re

from monitors import heartbeat
from runs import REPO

README = (REPO / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    return README[start:README.find("\n## ", start + 1)]


def test_every_heartbeat_status_is_explained():
    statuses = {value for name, value in vars(heartbeat).items() if name.isupper() and isinstance(value, str)}
    assert {"alive", "slow", "stalled", "waiting", "idle", "quiet", "gone"} <= statuses
    explained = set(re.findall(r"\*(\w[\w ]*)\*", section("Monitoring a live run")))
    assert statuses <= explained, f"not explained in the README: {sorted(statuses - explained)}"


def test_the_steps_a_program_reports_are_explained_with_the_dashboard():
    text = section("Monitoring a live run")
    assert "ctx.report(step=N)" in text and "slowest thread" in text
    assert "ctx.report(step=N)" in section("Writing your own program")

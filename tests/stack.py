"""`python -m tests.stack up | down | status`: the test session's own stack, kept running between pytest runs.

pytest starts the stack it needs and stops it at the end; with this one already up, a run of one integration
module pays only for its Spark session, since the `stack` fixture keeps what runs (docs/testing.md).
The ports and folder are the tests' (`PYTEST_PORT_OFFSET` applies), never the demo's.
"""

from __future__ import annotations

import sys

from pipeline.stack import Stack
from tests.conftest import make_config


def main(argv: list[str]) -> int:
    if argv not in (["up"], ["down"], ["status"]):
        print("usage: python -m tests.stack up | down | status", file=sys.stderr)
        return 2
    stack = Stack(make_config())
    if argv == ["up"]:
        stack.up()
    elif argv == ["down"]:
        stack.down()
    for svc in stack.status():
        print(f"{svc.name:<10} {svc.state:<9} {svc.address}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

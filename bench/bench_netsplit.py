"""Network partitions: acks=all write gaps per scenario and how soon replication resumes after the heal.

    python bench/bench_netsplit.py                                   # every scenario once
    python bench/bench_netsplit.py --scenario broker-split --hold 15 --rounds 3
    python bench/bench_netsplit.py --scenario broker-split --src ../old/src   # brokers from another tree

Needs root and network namespaces (ZooKeeper and each broker in its own, see tests/support/netns.py).
Two idempotent acks=all producers write to an RF 3 topic with 3 partitions and min.insync.replicas 2.
Per partition: `longest_gap_s`, the longest stretch from the cut to the end of the run without an
acknowledgement; `heal_to_first_ack_s`, from the heal to the next acknowledgement (for a partition
stalled by the cut, the time replication took to resume). One JSON document on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.netns import netns_unavailable  # noqa: E402
from tests.support.partitions import SCENARIOS, figures_only, run_partition  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS, help="repeatable; default: all")
    ap.add_argument("--hold", type=float, help="seconds each cut lasts (default: seeded, past the session timeout)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seed", type=int, help="first seed (the next rounds use seed+1, ...)")
    ap.add_argument("--src", help="source tree to run the brokers from (PYTHONPATH), e.g. an older checkout")
    args = ap.parse_args()
    reason = netns_unavailable()
    if reason is not None:
        sys.exit(f"cannot run: {reason}")
    env = {"PYTHONPATH": os.pathsep.join([str(Path(args.src).resolve()), str(ROOT)])} if args.src else {}
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    runs = []
    for scenario in args.scenario or list(SCENARIOS):
        for round_no in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="strom-netsplit-") as tmp, \
                    contextlib.redirect_stdout(sys.stderr):  # progress to stderr, the JSON alone on stdout
                result = run_partition(Path(tmp), scenario, seed + round_no, hold=args.hold, env=env)
            runs.append(figures_only(result))
            print(json.dumps(runs[-1]), file=sys.stderr)
    print(json.dumps({"src": args.src or "this checkout", "hold_s": args.hold, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()

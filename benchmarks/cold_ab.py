"""Two builds of spark-ivm side by side on cold refreshes: each round's refresh the first of a
new application, alternating between the builds round by round, on one warehouse.

    python benchmarks/cold_ab.py --base-python /tmp/base/.venv/bin/python --rounds 6

`--base-python` is the interpreter of another checkout's `make install` (its package and jar);
the other side is this interpreter. Each round changes the tables (as `cold.py` does), then
refreshes the view and recomputes its query in new applications of the round's build, and
checks the view against the recomputation. The warehouse is the one `benchmarks/cold.py --sf
<sf>` left under `--work` (run it once first). Results: benchmarks/results/<out>.jsonl, one
line per round.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from cold import run_worker  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-python", required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--orders", type=int, default=1500)
    parser.add_argument("--view", default="q10")
    parser.add_argument("--rely", action="store_true")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--memory", default="8g")
    parser.add_argument("--work", default=os.path.join(ROOT, "work"))
    parser.add_argument("--first-round", type=int, default=100, help="seed of the first round's change")
    parser.add_argument("--out", default="cold_ab")
    args = parser.parse_args()
    args.warehouse = os.path.join(args.work, f"warehouse-cold-sf{args.sf:g}")
    sides = {"base": args.base_python, "this": sys.executable}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"{args.out}.jsonl"), "w") as out:
        for i in range(args.rounds):
            round_ = args.first_round + i
            side = ("base", "this")[i % 2]
            run_worker(args, "change", round_)
            ref = run_worker(args, "refresh", round_, sides[side])
            rec = run_worker(args, "recompute", round_, sides[side])
            phases_s = sum(ref["phases_ms"].values()) / 1000
            row = {"round": i + 1, "side": side, "refresh_s": ref["refresh_s"],
                   "recompute_s": rec["recompute_s"], "ratio": rec["recompute_s"] / ref["refresh_s"],
                   "phases_s": phases_s, "before_phases_s": ref["refresh_s"] - phases_s,
                   "same": run_worker(args, "check", round_)["same"]}
            print(json.dumps(row), flush=True)
            out.write(json.dumps(row) + "\n")
            if not row["same"]:
                raise SystemExit(f"round {i + 1}: the view differs from its recomputation")


if __name__ == "__main__":
    main()

"""The eps trade-off of heavy/light view trees (Zhang 2022, chapter 5) on the 4-cycle
Q(A, C | B, D) over a skewed graph: update and delay against eps, at several sizes.

Runs the Scala harness ``io.sparkivm.access.TradeOffBench`` (test sources) in its own JVM, then
fits, per eps, the exponent of each cost in the size (least squares on log-log) and plots them
against the thesis's: update O(N^eps), delay O(N^(1-eps)).

    .venv/bin/python benchmarks/cqap_tradeoff.py --sizes 1000,3000,10000,30000 \\
        --eps 0,0.25,0.5,0.75,1 --out cqap_tradeoff
    .venv/bin/python benchmarks/cqap_tradeoff.py --graph adversarial --sizes 1000,3000,10000 \\
        --out cqap_tradeoff_adversarial

Costs are counted as work (view entries written and tuples joined per update; values visited
between two answers of a lookup), which does not depend on the machine's noise; times are
reported beside them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
from typing import Any, Dict, List, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
IMAGES = os.path.join(ROOT, "docs", "img")


def classpath() -> str:
    """The test classpath, from sbt (compiling the harness if need be)."""
    out = subprocess.run([os.path.join(ROOT, "build", "sbt"), "Test/compile", "export Test/fullClasspath"],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if not line.startswith("[")][-1].strip()


def rows_of(path: str) -> List[Dict[str, Any]]:
    """The rows of a harness's output (one JSON object per line)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def harness(main: str, out: str, *args: str) -> List[Dict[str, Any]]:
    """Runs a Scala harness of the test sources in its own JVM, writing `out`; its rows."""
    subprocess.run(["java", "-Xmx14g", "-cp", classpath(), main, out, *args], check=True)
    return rows_of(out)


def run(sizes: str, eps: str, updates: int, lookups: int, graph: str, out: str) -> List[Dict[str, Any]]:
    return harness("io.sparkivm.access.TradeOffBench", out, sizes, eps, str(updates), str(lookups), "1",
                   graph)


def slope(points: Sequence[Tuple[float, float]]) -> float:
    """Least-squares slope of log(cost) against log(n); points with no cost are left out."""
    xs = [math.log(n) for n, c in points if c > 0]
    ys = [math.log(c) for n, c in points if c > 0]
    if len(xs) < 2:
        return float("nan")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def worst_update(r: Dict[str, float]) -> float:
    """The costliest update measured: a light key's at its threshold, or (no light keys, as at
    eps = 0) a typical one."""
    return max(r["update_work_worst"], r["update_work"])


def exponents(rows: List[Dict[str, float]], key: str) -> Dict[float, float]:
    cost = worst_update if key == "update" else (lambda r: r[key])
    return {e: slope(sorted((r["n"], cost(r)) for r in rows if r["eps"] == e))
            for e in sorted({r["eps"] for r in rows})}


def plot(rows: List[Dict[str, float]], name: str, graph: str) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epsilons = sorted({r["eps"] for r in rows})
    largest = max(r["n"] for r in rows)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    update, delay = exponents(rows, "update"), exponents(rows, "random_delay_work")
    left.plot(epsilons, [update[e] for e in epsilons], "o-", label="update (worst), measured")
    left.plot(epsilons, [delay[e] for e in epsilons], "s-", label="delay (lookup without answers), measured")
    left.plot([0, 1], [0, 1], "--", color="grey", label="thesis: update N^eps")
    left.plot([0, 1], [1, 0], ":", color="grey", label="thesis: delay N^(1-eps)")
    left.set_xlabel("eps")
    left.set_ylabel("exponent of the cost in N")
    sizes = ", ".join(str(n) for n in sorted({r["n"] for r in rows}))
    left.set_title(f"Fitted exponents, {graph} graph, N = {sizes}", fontsize=10)
    left.legend(fontsize=8)
    at = [r for r in rows if r["n"] == largest]
    right.semilogy([r["eps"] for r in at], [worst_update(r) for r in at], "o-", label="update: work, worst")
    right.semilogy([r["eps"] for r in at], [r["update_work"] for r in at], "o--",
                   label="update: work, typical")
    right.semilogy([r["eps"] for r in at], [max(r["random_delay_work"], 0.5) for r in at], "s-",
                   label="delay: work, lookup without answers")
    right.semilogy([r["eps"] for r in at], [max(r["delay_work"], 0.5) for r in at], "s--",
                   label="delay: work, lookup of a path's ends")
    right.set_xlabel("eps")
    right.set_title(f"Cost at N = {largest} edges per atom")
    right.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(IMAGES, exist_ok=True)
    path = os.path.join(IMAGES, f"{name}.png")
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,3000,10000,30000")
    parser.add_argument("--eps", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--lookups", type=int, default=300)
    parser.add_argument("--graph", choices=["zipf", "adversarial"], default="zipf",
                        help="a Zipf graph, or per eps the worst case of its bounds (hubs of degree "
                             "2 theta, light keys of 0.9 theta)")
    parser.add_argument("--out", default="cqap_tradeoff")
    parser.add_argument("--from-jsonl", help="plot rows measured before instead of running")
    args = parser.parse_args()
    os.makedirs(RESULTS, exist_ok=True)
    raw = os.path.join(RESULTS, f"{args.out}.jsonl")
    if args.from_jsonl:
        rows = rows_of(args.from_jsonl)
    else:
        rows = run(args.sizes, args.eps, args.updates, args.lookups, args.graph, raw)
    # On one graph every eps answers every request alike: the trees are checked against each other.
    for n in sorted({r["n"] for r in rows}) if args.graph == "zipf" else []:
        answers = {r["answers"] for r in rows if r["n"] == n}
        assert len(answers) == 1, f"the eps disagree at n = {n}: {answers}"
    update, delay = exponents(rows, "update"), exponents(rows, "random_delay_work")
    with open(os.path.join(RESULTS, f"{args.out}.json"), "w") as f:
        json.dump({"rows": rows, "update_exponent": update, "delay_exponent": delay}, f, indent=1)
    print("eps  update exponent (thesis eps)  delay exponent (thesis 1-eps)")
    for e in update:
        print(f"{e:4}  {update[e]:6.2f}  {delay[e]:6.2f}")
    print("plot:", plot(rows, args.out, args.graph))


if __name__ == "__main__":
    main()

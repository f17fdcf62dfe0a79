"""A bar chart of the slowest TPC-DS views' refreshes, before and after a change.

Reads a results file of ``tests/compat/tpcds_queries.py`` runs (``benchmarks/results/tpcds_*.json``:
two runs, each query's steps with their refresh time and jobs) and plots, for the queries whose
slowest refresh was slowest in either run, each run's refresh time summed over the steps::

    .venv/bin/python benchmarks/plot_tpcds.py benchmarks/results/tpcds_strict_s66.json \
        docs/img/tpcds_repeated_steps_s66.png [--top 12]
"""

from __future__ import annotations

import argparse
import json
from typing import Dict, List

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("out")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    data = json.load(open(args.results))
    runs: Dict[str, Dict[str, List[dict]]] = {k: v for k, v in data.items() if isinstance(v, dict)}
    labels = list(runs)

    def total(run: str, q: str) -> float:
        return sum(s["refresh_s"] for s in runs[run].get(q, []))

    queries = sorted({q for r in runs.values() for q in r}, key=lambda q: -max(total(r, q) for r in labels))
    chosen = queries[:args.top]
    width = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for i, run in enumerate(labels):
        xs = [j + i * width for j in range(len(chosen))]
        bars = ax.bar(xs, [total(run, q) for q in chosen], width, label=run)
        for bar, q in zip(bars, chosen, strict=True):
            jobs = sum(s["jobs"] for s in runs[run].get(q, []))
            ax.annotate(str(jobs), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    ax.set_xticks([j + width * (len(labels) - 1) / 2 for j in range(len(chosen))])
    ax.set_xticklabels([f"q{q}" for q in chosen])
    ax.set_ylabel("refresh time, 3 steps summed (s); jobs above each bar")
    ax.set_title(f"TPC-DS views at SF {data.get('sf', '?')}: the slowest refreshes")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()

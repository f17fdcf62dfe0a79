"""Plots two runs of cold.py side by side, one with the driver's class-data archive and one
without (``SPARK_IVM_BENCH_CONF="spark.ivm.driver.classDataSharing=false"``): per round, each
application's JVM and session start, and its statement (the refresh, or the recomputation).

    python benchmarks/plot_class_data.py cold_sf1_cds_on cold_sf1_cds_off
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    on, off = (json.load(open(os.path.join(HERE, "results", f"{name}.json"))) for name in sys.argv[1:3])
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = []
    for label, result in (("archive", on), ("no archive", off)):
        for r in result["cold"]:
            for side, key in (("refresh", "refresh_s"), ("recompute", "recompute_s")):
                bars.append((f"{side}\n{label}\nround {r['round']}", r[side]["session_s"], r[side][key]))
    xs = range(len(bars))
    ax.bar(xs, [b[1] for b in bars], label="JVM and session start")
    ax.bar(xs, [b[2] for b in bars], bottom=[b[1] for b in bars], label="the statement")
    ax.set_xticks(list(xs), [b[0] for b in bars], fontsize=6)
    ax.set_ylabel("seconds")
    ax.set_title(f"Q10 at SF {on['sf']:g}, each a new application: with and without the class-data archive",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(os.path.dirname(HERE), "docs", "img", f"{sys.argv[1]}_vs_off.png"), dpi=110)


if __name__ == "__main__":
    main()

"""Write a simulated RL run, with its ground truth in meta.json.

usage: rlscope simulate --scenario NAME [--steps N] --out RUN_DIR [--seed S]
       rlscope simulate --list

The run directory holds the same tables a real run has (steps, spans, trajectories,
gpu, logprob) and meta.json["ground_truth"]: what an analyzer should find (throughput
and tail time, forward and training time, the balanced rollout:train split, injected
faults). A seed gives the same tables every time. See docs/simulator.md.

examples:
  rlscope simulate --list
  rlscope simulate --scenario longtail-8b --steps 10 --out runs/longtail
"""

from __future__ import annotations

from collections.abc import Sequence

from rlscope.advice.finding import fmt_seconds, fmt_steps
from rlscope.cli._args import parser_for
from rlscope.errors import UsageError

__all__ = ["MAX_STEPS", "main"]

# ten times the longest bench run (1,000 steps of longtail-8b: 3 minutes, 140 KB a step): a typo
# of a few zeros is refused, not simulated until the disk is full
MAX_STEPS = 10_000


def main(argv: Sequence[str]) -> int:
    parser = parser_for("simulate", __doc__)
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--scenario", metavar="NAME", help="scenario to simulate (see --list)")
    parser.add_argument(
        "--steps",
        type=int,
        metavar="N",
        help=f"trainer steps to simulate, 1 to {MAX_STEPS:,} (default: the scenario's)",
    )
    parser.add_argument("--out", metavar="RUN_DIR", help="new or empty directory to write the run to")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(list(argv))

    from rlscope.trace.simulator import SCENARIOS, get_scenario, simulate

    if args.list:
        width = max(map(len, SCENARIOS))
        for name, sc in SCENARIOS.items():
            print(f"{name:<{width}}  {sc.topology:<16}  {sc.summary}")
        return 0
    if not args.scenario or not args.out:
        raise UsageError("simulate: --scenario and --out are required (or --list to see the scenarios)")
    if not 0 <= args.seed < 2**32:  # numpy's seeds
        raise UsageError(f"simulate: --seed must be a whole number from 0 to 2**32 - 1, got {args.seed}")
    if args.steps is not None and not 1 <= args.steps <= MAX_STEPS:
        raise UsageError(f"simulate: --steps must be a whole number from 1 to {MAX_STEPS:,}, got {args.steps}")
    scenario = get_scenario(args.scenario)
    steps = scenario.default_steps if args.steps is None else args.steps
    meta = simulate(scenario, steps, args.out, seed=args.seed)
    mean = meta["ground_truth"]["mean"]
    print(
        f"wrote {fmt_steps(steps)} of {scenario.name} ({scenario.topology}, seed {args.seed}) to {args.out}: "
        f"gen {fmt_seconds(mean['T_gen_s'])} s (throughput {fmt_seconds(mean['T_thr_s'])} + tail {fmt_seconds(mean['T_tail_s'])}), "
        f"forward {fmt_seconds(mean['forward_s'])} s, train {fmt_seconds(mean['train_s'])} s, step {fmt_seconds(mean['step_s'])} s"
    )
    return 0

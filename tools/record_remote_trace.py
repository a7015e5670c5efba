"""Record the remote-target runs shipped in assets/traces/: the default draft here, the
default target on a vLLM server, so the Parallel and Replay pages show a remote target's
network and queue time with no server at hand.

    python -m specviz.models.vllm_local serve --dtype bfloat16 --port 8000     # in another shell
    python tools/record_remote_trace.py --target-url http://127.0.0.1:8000

Records ``code-autoregressive-remote-greedy`` (the target alone, through the server) and
``code-gamma4-remote-greedy`` (speculative, γ 4), greedy (a remote target is greedy only),
64 new tokens, the prompt of tools/record_traces.py. Each verify request's time outside the
server's compute (its /metrics tell) is the trace's ``network`` span.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from record_traces import MAX_NEW_TOKENS, OUT, PROMPTS

from specviz import autoregressive, load_pair, speculative
from specviz.record.run_config import RunConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target-url", required=True, help="the vLLM server serving the default target")
    ap.add_argument("--dtype", default="auto", help="the draft's (here): auto is bf16 where the CPU has it")
    ap.add_argument("--prompt", default="code", choices=list(PROMPTS))
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    pair = load_pair(target_url=args.target_url, dtype=args.dtype)
    base = RunConfig(prompt=PROMPTS[args.prompt], max_new_tokens=MAX_NEW_TOKENS, temperature=0.0)
    runs = {f"{args.prompt}-autoregressive-remote-greedy": (autoregressive, replace(base, mode="autoregressive")),
            f"{args.prompt}-gamma{args.gamma}-remote-greedy": (speculative, replace(base, gamma=args.gamma))}
    args.out.mkdir(parents=True, exist_ok=True)
    for stem, (run, config) in runs.items():
        trace = run(pair, config).run()
        if trace.contention:
            raise SystemExit(f"{stem}: timed under contention ({trace.contention}); not saved")
        network = sum(e.duration_ms for e in trace.events if e.kind == "network")
        trace.save(args.out / f"{stem}.json")
        s = trace.summary
        print(f"{stem}: {s['new_tokens']} tokens, {s['tokens_per_second']:.2f} tok/s, {network:.0f} ms of "
              f"{trace.wall_ms:.0f} ms on the network and in the server's queue", flush=True)


if __name__ == "__main__":
    main()

"""Command line: ``icml-theory privacy --sigma 1 --q 0.01 --steps 1000 --delta 1e-5``."""

from __future__ import annotations

import argparse
import sys
import time


def _privacy(args) -> int:
    from icml_theory.privacy import OptimalRDPAccountant

    acc = OptimalRDPAccountant().step(noise_multiplier=args.sigma, sample_rate=args.q, num_steps=args.steps)
    print(
        f"DP-SGD: noise multiplier {args.sigma}, sample rate {args.q}, {args.steps} steps, delta {args.delta:g}"
    )
    rows = []
    for method, label in (
        ("optimal", "optimal RDP -> f-DP (this package)"),
        ("cks", "RDP, Balle et al./CKS conversion"),
        ("mironov", "RDP, Mironov conversion"),
    ):
        start = time.perf_counter()
        rows.append((label, acc.get_epsilon(args.delta, method=method), time.perf_counter() - start))
    pld = _pld_epsilon(args)
    if pld is not None:
        rows.append(("PLD accountant (dp_accounting; not RDP-based)", *pld))
    width = max(len(r[0]) for r in rows)
    for label, eps, seconds in rows:
        print(f"  {label:<{width}}  epsilon = {eps:.6f}   ({seconds:.2f} s)")
    beta = acc.get_beta(args.alpha)
    print(
        f"  optimal trade-off: beta({args.alpha:g}) = {beta:.6f} (TPR of any attack at FPR {args.alpha:g} <= {1 - beta:.6f})"
    )
    if args.plot:
        from icml_theory.privacy.plot import plot_tradeoff_curves

        plot_tradeoff_curves(
            acc.profile, args.plot, title=f"DP-SGD sigma={args.sigma}, q={args.q}, T={args.steps}"
        )
        print(f"  plot written to {args.plot}")
    return 0


def _pld_epsilon(args):
    """epsilon from dp_accounting's PLD accountant when it is installed (the `compare` extra), else None."""
    try:
        import dp_accounting
    except ImportError:
        return None
    start = time.perf_counter()
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(args.q, dp_accounting.GaussianDpEvent(args.sigma)), args.steps
    )
    acc = dp_accounting.pld.PLDAccountant()
    acc.compose(event)
    return acc.get_epsilon(args.delta), time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="icml-theory", description="icml-theory command line tools")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "privacy", help="epsilon of DP-SGD by the optimal RDP conversion and the classical ones"
    )
    p.add_argument("--sigma", type=float, required=True, help="noise multiplier (> 0)")
    p.add_argument("--q", type=float, required=True, help="Poisson sampling rate in (0, 1]")
    p.add_argument("--steps", type=int, required=True, help="number of steps (>= 1)")
    p.add_argument("--delta", type=float, default=1e-5, help="target delta in (0, 1) (default 1e-5)")
    p.add_argument(
        "--alpha", type=float, default=0.1, help="type I error for the reported beta (default 0.1)"
    )
    p.add_argument("--plot", default="tradeoff.png", help="PNG path for the trade-off plot ('' to skip)")
    args = parser.parse_args(argv)
    try:
        return _privacy(args)
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
